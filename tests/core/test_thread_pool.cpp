// ThreadPool::parallel_for: exact coverage, grain, inline execution, error
// propagation and liveness under many successive calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/thread_pool.hpp"

namespace h3s {
namespace {

using Range = std::pair<int64_t, int64_t>;

// Aborts the test binary if a test body does not finish in time, so a deadlock
// shows up as a failure instead of a hang.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit, const char* what)
      : thread_([this, limit, what] {
          std::unique_lock<std::mutex> lock(mu_);
          if (!cv_.wait_for(lock, limit, [this] { return done_; })) {
            std::fprintf(stderr, "Watchdog: %s did not finish (deadlock?)\n", what);
            std::fflush(stderr);
            std::abort();
          }
        }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

struct Record {
  std::mutex mu;
  std::vector<Range> ranges;
  std::set<std::thread::id> threads;
};

// Runs parallel_for and checks: every index in [0, n) is visited exactly once,
// ranges are non-empty, disjoint and contiguous, every range but the last holds
// at least `grain` elements, and there are no more ranges than threads.
void check_cover(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(size_t(std::max<int64_t>(n, 0)));
  for (auto& h : hits) h.store(0);
  Record rec;
  pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
    std::lock_guard<std::mutex> lock(rec.mu);
    rec.ranges.emplace_back(b, e);
    rec.threads.insert(std::this_thread::get_id());
  });
  const std::string ctx = "threads=" + std::to_string(pool.size()) + " n=" + std::to_string(n) +
                          " grain=" + std::to_string(grain);
  for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << ctx << " index " << i;
  if (n <= 0) {
    EXPECT_TRUE(rec.ranges.empty()) << ctx;
    return;
  }
  std::sort(rec.ranges.begin(), rec.ranges.end());
  ASSERT_FALSE(rec.ranges.empty()) << ctx;
  EXPECT_LE(int64_t(rec.ranges.size()), int64_t(pool.size())) << ctx;
  EXPECT_LE(rec.threads.size(), size_t(pool.size())) << ctx;
  int64_t at = 0;
  const int64_t g = std::max<int64_t>(grain, 1);
  for (const Range& r : rec.ranges) {
    EXPECT_EQ(r.first, at) << ctx;
    EXPECT_LT(r.first, r.second) << ctx;
    if (r.second != n) {
      EXPECT_GE(r.second - r.first, g) << ctx << " range [" << r.first << "," << r.second << ")";
    }
    at = r.second;
  }
  EXPECT_EQ(at, n) << ctx;
  // When the work divides into at least two grains, more than one part is used.
  if (pool.size() > 1 && n >= 2 * g) {
    EXPECT_GE(rec.ranges.size(), 2u) << ctx;
  }
  // With all but the last range at least a grain long, there are at most
  // ceil(n / grain) of them.
  EXPECT_LE(int64_t(rec.ranges.size()), (n + g - 1) / g) << ctx;
}

TEST(ThreadPoolCover, ManySizesGrainsAndThreadCounts) {
  Watchdog dog(std::chrono::seconds(120), "ManySizesGrainsAndThreadCounts");
  for (int threads : {1, 2, 3, 4, 5, 7, 8, 16}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 100, 1000, 4097}) {
      for (int64_t grain : {-3, 0, 1, 2, 3, 4, 7, 16, 64, 1000, 5000}) {
        check_cover(pool, n, grain);
        if (HasFatalFailure()) return;
      }
    }
  }
}

TEST(ThreadPoolCover, GrainIsRespected) {
  ThreadPool pool(4);
  // 5 elements, grain 2 on 4 threads: at most 2 parts (sizes 2 and 3), never a
  // part of 1.
  Record rec;
  pool.parallel_for(5, 2, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(rec.mu);
    rec.ranges.emplace_back(b, e);
  });
  std::sort(rec.ranges.begin(), rec.ranges.end());
  ASSERT_EQ(rec.ranges.size(), 2u);
  for (const Range& r : rec.ranges) EXPECT_GE(r.second - r.first, 2);
  // n below the grain runs as one call.
  rec.ranges.clear();
  pool.parallel_for(10, 11, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(rec.mu);
    rec.ranges.emplace_back(b, e);
  });
  ASSERT_EQ(rec.ranges.size(), 1u);
  EXPECT_EQ(rec.ranges[0], Range(0, 10));
}

TEST(ThreadPoolCover, NegativeAndZeroNDoNotCall) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  for (int64_t n : {int64_t(0), int64_t(-1), int64_t(-1000), INT64_MIN}) {
    pool.parallel_for(n, 1, [&](int64_t, int64_t) { calls.fetch_add(1); });
  }
  EXPECT_EQ(calls.load(), 0);
  ThreadPool single(1);
  single.parallel_for(0, 1, [&](int64_t, int64_t) { calls.fetch_add(1); });
  EXPECT_EQ(calls.load(), 0);
}

TEST(ThreadPoolCover, UsesEveryThreadAndTheCaller) {
  ThreadPool pool(4);
  Record rec;
  std::thread::id part0;
  pool.parallel_for(400, 1, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(rec.mu);
    rec.ranges.emplace_back(b, e);
    rec.threads.insert(std::this_thread::get_id());
    if (b == 0) part0 = std::this_thread::get_id();
  });
  EXPECT_EQ(rec.ranges.size(), 4u);
  EXPECT_EQ(rec.threads.size(), 4u);
  EXPECT_EQ(part0, std::this_thread::get_id()) << "the calling thread takes part";
}

TEST(ThreadPoolCover, LargeIndices) {
  // Ranges are 64-bit: n beyond 2^31 is split without overflow.
  ThreadPool pool(8);
  const int64_t n = (int64_t(1) << 40) + 12345;
  Record rec;
  pool.parallel_for(n, 1 << 20, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(rec.mu);
    rec.ranges.emplace_back(b, e);
  });
  std::sort(rec.ranges.begin(), rec.ranges.end());
  ASSERT_EQ(rec.ranges.size(), 8u);
  int64_t at = 0;
  for (const Range& r : rec.ranges) {
    EXPECT_EQ(r.first, at);
    EXPECT_GE(r.second - r.first, n / 8);
    EXPECT_LE(r.second - r.first, n / 8 + 1);
    at = r.second;
  }
  EXPECT_EQ(at, n);
}

TEST(ThreadPoolCover, ResultIndependentOfThreadCount) {
  const int64_t n = 10007;
  std::vector<double> want;
  for (int threads : {1, 2, 3, 6, 13}) {
    ThreadPool pool(threads);
    std::vector<double> out(size_t(n), -1.0);
    pool.parallel_for(n, 7, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) out[size_t(i)] = double(i) * 0.5 + 1.0 / double(i + 1);
    });
    if (want.empty())
      want = out;
    else
      EXPECT_EQ(out, want) << threads;
  }
}

TEST(ThreadPoolInline, SingleThreadRunsInline) {
  ThreadPool pool(1);
  EXPECT_EQ(pool.size(), 1);
  int calls = 0;  // plain int: everything runs on this thread
  std::thread::id who;
  Range got;
  pool.parallel_for(1000, 1, [&](int64_t b, int64_t e) {
    ++calls;
    who = std::this_thread::get_id();
    got = {b, e};
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(who, std::this_thread::get_id());
  EXPECT_EQ(got, Range(0, 1000));
}

TEST(ThreadPoolInline, DefaultThreadCount) {
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool a(0);
  EXPECT_EQ(a.size(), hw);
  ThreadPool b(-5);
  EXPECT_EQ(b.size(), hw);
  ThreadPool c;
  EXPECT_EQ(c.size(), hw);
  check_cover(a, 12345, 3);
}

TEST(ThreadPoolInline, SmallJobOnBigPoolRunsInlineOnCaller) {
  ThreadPool pool(8);
  std::thread::id who;
  int calls = 0;
  pool.parallel_for(5, 4, [&](int64_t b, int64_t e) {
    ++calls;
    who = std::this_thread::get_id();
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 5);
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(who, std::this_thread::get_id());
}

TEST(ThreadPoolErrors, ExceptionFromWorkerPropagates) {
  Watchdog dog(std::chrono::seconds(60), "ExceptionFromWorkerPropagates");
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(400);
  for (auto& h : hits) h.store(0);
  try {
    pool.parallel_for(400, 1, [&](int64_t b, int64_t e) {
      if (b != 0 && e == 400) throw std::runtime_error("worker boom");
      for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
    });
    FAIL() << "exception not propagated";
  } catch (const std::runtime_error& err) {
    EXPECT_STREQ(err.what(), "worker boom");
  }
  // The non-throwing parts all ran to completion before the rethrow.
  for (int64_t i = 0; i < 300; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << i;
  check_cover(pool, 1000, 1);
  check_cover(pool, 3, 1);
}

TEST(ThreadPoolErrors, ExceptionFromCallerPartPropagatesAfterWorkersFinish) {
  Watchdog dog(std::chrono::seconds(60), "ExceptionFromCallerPart");
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(400);
  for (auto& h : hits) h.store(0);
  EXPECT_THROW(pool.parallel_for(400, 1,
                                 [&](int64_t b, int64_t e) {
                                   if (b == 0) throw std::logic_error("caller boom");
                                   std::this_thread::sleep_for(std::chrono::milliseconds(30));
                                   for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1);
                                 }),
               std::logic_error);
  // parallel_for did not return while workers were still touching `hits`.
  for (int64_t i = 100; i < 400; ++i) EXPECT_EQ(hits[size_t(i)].load(), 1) << i;
  check_cover(pool, 777, 5);
}

TEST(ThreadPoolErrors, ManyThrowingPartsRethrowOneAndRecover) {
  Watchdog dog(std::chrono::seconds(60), "ManyThrowingParts");
  ThreadPool pool(6);
  for (int round = 0; round < 50; ++round) {
    EXPECT_THROW(pool.parallel_for(60, 1, [](int64_t, int64_t) { throw std::runtime_error("x"); }),
                 std::runtime_error);
    // A following successful call does not see a stale error.
    EXPECT_NO_THROW(check_cover(pool, 60, 1));
  }
}

TEST(ThreadPoolErrors, InlineExceptionPropagates) {
  ThreadPool pool(1);
  EXPECT_THROW(pool.parallel_for(10, 1, [](int64_t, int64_t) { throw std::out_of_range("r"); }),
               std::out_of_range);
  check_cover(pool, 10, 1);
}

TEST(ThreadPoolStress, ManySuccessiveCallsDoNotDeadlock) {
  Watchdog dog(std::chrono::seconds(120), "ManySuccessiveCalls");
  for (int threads : {2, 4, 8, 16}) {
    ThreadPool pool(threads);
    std::atomic<int64_t> total{0};
    int64_t want = 0;
    for (int call = 0; call < 2000; ++call) {
      const int64_t n = 1 + call % 37;  // mixes inline and parallel calls
      const int64_t grain = 1 + call % 3;
      pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
        int64_t s = 0;
        for (int64_t i = b; i < e; ++i) s += i + 1;
        total.fetch_add(s, std::memory_order_relaxed);
      });
      want += n * (n + 1) / 2;
      ASSERT_EQ(total.load(), want) << "threads=" << threads << " call=" << call;
    }
  }
}

TEST(ThreadPoolStress, ConstructDestroyRepeatedly) {
  Watchdog dog(std::chrono::seconds(120), "ConstructDestroyRepeatedly");
  for (int i = 0; i < 200; ++i) {
    ThreadPool pool(1 + i % 8);
    if (i % 2) check_cover(pool, 64, 1);
  }
}

TEST(ThreadPoolStress, TwoPoolsFromTwoThreads) {
  Watchdog dog(std::chrono::seconds(120), "TwoPoolsFromTwoThreads");
  auto run = [](int seed, std::atomic<int64_t>* out) {
    ThreadPool pool(3);
    for (int call = 0; call < 500; ++call) {
      const int64_t n = 10 + (call * seed) % 50;
      pool.parallel_for(n, 1, [&](int64_t b, int64_t e) { out->fetch_add(e - b); });
    }
  };
  std::atomic<int64_t> a{0}, b{0};
  std::thread t1(run, 3, &a), t2(run, 7, &b);
  t1.join();
  t2.join();
  int64_t wa = 0, wb = 0;
  for (int call = 0; call < 500; ++call) {
    wa += 10 + (call * 3) % 50;
    wb += 10 + (call * 7) % 50;
  }
  EXPECT_EQ(a.load(), wa);
  EXPECT_EQ(b.load(), wb);
}

}  // namespace
}  // namespace h3s
