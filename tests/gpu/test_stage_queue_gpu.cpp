// The CUDA stage queue's ordering (backend/stage_queue.hpp) with its two copy
// streams, one per direction: a copy that reads what an earlier copy of the
// other direction writes, or overwrites what it reads, runs after it; and
// ops issued after wait(t) run after every copy issued before t, of both
// directions. Each check is a race that 64 MiB copies (over a millisecond
// each on PCIe) lose when the ordering is missing.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/stage_queue.hpp"
#include "core/arena.hpp"
#include "gpu_fixture.hpp"

namespace h3s::test {
namespace {

constexpr int64_t kRows = 4096, kCols = 8192;  // 64 MiB of bf16

std::vector<uint16_t> pattern(uint16_t seed) {
  std::vector<uint16_t> v(size_t(kRows * kCols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint16_t(seed + i * 7);
  return v;
}

class GpuStageQueue : public GpuBackendTest {
 protected:
  void SetUp() override {
    GpuBackendTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;  // no device: the base skipped
    host_ = std::make_unique<Arena>(gpu_->host_staging_memory(), 0);
    queue_ = gpu_->make_stage_queue();
  }
  OwnedTensor device(const char* name) { return arena_->tensor(DType::bf16, {kRows, kCols}, name); }
  OwnedTensor host(const char* name, const std::vector<uint16_t>& values) {
    OwnedTensor t = host_->tensor(DType::bf16, {kRows, kCols}, name);
    std::memcpy(t.view.data, values.data(), values.size() * 2);
    return t;
  }
  static std::vector<uint16_t> host_values(const OwnedTensor& t) {
    const auto* p = static_cast<const uint16_t*>(t.view.data);
    return {p, p + kRows * kCols};
  }
  std::vector<uint16_t> device_values(const OwnedTensor& t) {
    std::vector<uint16_t> v(size_t(kRows * kCols));
    gpu_->download(t.view, v.data());
    return v;
  }
  std::unique_ptr<Arena> host_;
  std::unique_ptr<StageQueue> queue_;
};

// Out to the host, straight back in from there: the copy in reads what the
// copy out wrote.
TEST_F(GpuStageQueue, CopyInAfterCopyOutOfTheSameHostRows) {
  const std::vector<uint16_t> a = pattern(1), sentinel = pattern(999);
  OwnedTensor d = device("source"), back = device("copied back");
  gpu_->upload(a.data(), d.view);
  OwnedTensor h = host("staged", sentinel);
  queue_->to_host(d.view, h.view);
  queue_->wait(queue_->to_device(h.view, back.view));
  gpu_->synchronize();
  EXPECT_TRUE(device_values(back) == a);
}

// A slot copied out, then refilled by a copy in: the copy out reads the old
// rows.
TEST_F(GpuStageQueue, CopyInWaitsForTheCopyOutOfItsDestination) {
  const std::vector<uint16_t> a = pattern(2), b = pattern(3), sentinel = pattern(998);
  OwnedTensor slot = device("slot");
  gpu_->upload(a.data(), slot.view);
  OwnedTensor out = host("out", sentinel), next = host("next", b);
  queue_->to_host(slot.view, out.view);
  queue_->wait(queue_->to_device(next.view, slot.view));
  gpu_->synchronize();
  EXPECT_TRUE(host_values(out) == a);
  EXPECT_TRUE(device_values(slot) == b);
}

// wait() on a small copy in covers the large copy out issued before it: the
// op after the wait overwrites that copy's source only once it has run.
TEST_F(GpuStageQueue, WaitCoversEarlierCopiesOfTheOtherDirection) {
  const std::vector<uint16_t> a = pattern(4), b = pattern(5), sentinel = pattern(997);
  OwnedTensor src = device("source"), other = device("other"), small = device("small");
  gpu_->upload(a.data(), src.view);
  gpu_->upload(b.data(), other.view);
  OwnedTensor out = host("out", sentinel), tiny = host("tiny", sentinel);
  queue_->to_host(src.view, out.view);
  const StageQueue::Ticket t =
      queue_->to_device(tiny.view.rows_view(0, 1), small.view.rows_view(0, 1));
  queue_->wait(t);
  gpu_->copy(other.view, src.view);  // overwrites the copy out's source
  gpu_->synchronize();
  EXPECT_TRUE(host_values(out) == a);
}

}  // namespace
}  // namespace h3s::test
