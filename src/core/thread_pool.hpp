// ThreadPool: a fixed set of workers for the CPU backend's parallel loops.
//
// parallel_for splits [0, n) into contiguous static ranges; the split never
// affects results because every range computes whole output elements (no
// cross-thread reductions), so results are identical for any thread count.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace h3s {

class ThreadPool {
 public:
  // threads <= 0: std::thread::hardware_concurrency(); more than
  // max_threads() is refused (Error(invalid_argument) naming the limit).
  explicit ThreadPool(int threads = 0);
  // The most workers a pool takes: a few per hardware thread (more only cost
  // memory and scheduling; 100,000 exhaust a host's process limit).
  static int max_threads();
  static int hardware_threads();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  int size() const { return int(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint ranges covering [0, n), each at least
  // `grain` long (except the last); blocks until all are done. The calling
  // thread takes part. Exceptions from fn are rethrown here.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0, job_parts_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace h3s
