// Fixed worker pool with a static split per parallel_for call.
#include "core/thread_pool.hpp"

#include <algorithm>
#include <exception>

#include "core/error.hpp"

namespace h3s {

namespace {
void run_part(const std::function<void(int64_t, int64_t)>& fn, int64_t n, int64_t parts,
              int64_t part) {
  const int64_t begin = n * part / parts, end = n * (part + 1) / parts;
  if (begin < end) fn(begin, end);
}
}  // namespace

int ThreadPool::hardware_threads() {
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int ThreadPool::max_threads() {
  return std::max(64, 4 * hardware_threads());
}

ThreadPool::ThreadPool(int threads) {
  if (threads > max_threads())
    fail(ErrorKind::invalid_argument,
         "threads = {} is more than this host can use: give at most {} ({} hardware threads; "
         "0: all of them)",
         threads, max_threads(), hardware_threads());
  if (threads <= 0) threads = hardware_threads();
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int64_t, int64_t)>* job;
    int64_t n, parts;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = job_n_;
      parts = job_parts_;
    }
    std::exception_ptr err;
    if (index < parts) {
      try {
        run_part(*job, n, parts, index);
      } catch (...) {
        err = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (err && !error_) error_ = err;
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  // floor(n / grain) parts at most, so every part holds at least `grain` elements.
  const int64_t parts = std::min<int64_t>(size(), n / grain);
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    pending_ = int(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  wake_.notify_all();
  std::exception_ptr err;
  try {
    run_part(fn, n, parts, 0);
  } catch (...) {
    err = std::current_exception();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  if (!err) err = error_;
  if (err) std::rethrow_exception(err);
}

}  // namespace h3s
