// The device memory in use by the driver's count (total - free), sampled on a
// thread of its own while a run goes on, and its highest reading. A reading
// after the run is not a peak: buffers the run freed may have gone back to the
// driver by then (on 2026-12-07, 1M tokens read 1.78 GiB after a run whose
// plan peaked near 14 GiB).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <thread>
#include <utility>

namespace h3s::cli {

class DriverPeak {
 public:
  // Every 2 ms: a placement phase that holds its buffers lasts far longer.
  static constexpr std::chrono::milliseconds kPeriod{2};

  // read: the bytes in use now (Backend::device_memory_in_use; 0 where unknown).
  explicit DriverPeak(std::function<size_t()> read) : read_(std::move(read)) {
    sample();
    if (peak_.load() == 0) return;  // the backend cannot say (the CPU's)
    thread_ = std::jthread([this](std::stop_token stop) {
      while (!stop.stop_requested()) {
        sample();
        std::this_thread::sleep_for(kPeriod);
      }
    });
  }
  DriverPeak(const DriverPeak&) = delete;
  DriverPeak& operator=(const DriverPeak&) = delete;

  // Stops sampling (one last reading first); the highest reading, 0 where the
  // backend cannot say.
  size_t stop() {
    if (thread_.joinable()) {
      thread_.request_stop();
      thread_.join();
      sample();
    }
    return peak_.load();
  }

 private:
  void sample() {
    const size_t now = read_();
    size_t seen = peak_.load();
    while (now > seen && !peak_.compare_exchange_weak(seen, now)) {
    }
  }

  std::function<size_t()> read_;
  std::atomic<size_t> peak_{0};
  std::jthread thread_;  // last: stopped and joined before the members it reads go
};

}  // namespace h3s::cli
