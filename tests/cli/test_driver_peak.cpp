// tools/h3s/driver_peak.hpp: the highest driver reading over a run, taken on a
// thread of its own (h3s bench's device_in_use_driver_gib), with a scripted
// reading in place of the driver's.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "driver_peak.hpp"

namespace h3s::cli {
namespace {

TEST(DriverPeak, KeepsABriefHighReadingTheRunHasReleasedByItsEnd) {
  // The 4th reading is the run's peak; every later one is lower, as when a run's
  // buffers go back to the driver before a reading after it (2026-12-07, 1M tokens).
  std::atomic<int> calls{0};
  DriverPeak peak([&calls] { return calls.fetch_add(1) == 3 ? size_t(100) : size_t(10); });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (calls.load() < 8 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GE(calls.load(), 8) << "the sampling thread did not read";
  EXPECT_EQ(peak.stop(), 100u);
  const int after = calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(calls.load(), after) << "stop() left the thread reading";
}

TEST(DriverPeak, ABackendThatCannotSayReadsZeroAndStartsNoThread) {
  std::atomic<int> calls{0};
  DriverPeak peak([&calls] {
    ++calls;
    return size_t(0);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(calls.load(), 1);  // the first reading only
  EXPECT_EQ(peak.stop(), 0u);
}

}  // namespace
}  // namespace h3s::cli
