// Arena: budget enforcement, byte accounting, Buffer ownership, the per-phase
// ledger and format_bytes.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.hpp"
#include "core/error.hpp"

namespace h3s {
namespace {

// Hands out fake, never-dereferenced addresses and records every call, so the
// tests can check that each allocation is released exactly once with its size.
class FakeMemory final : public MemoryResource {
 public:
  void* allocate(size_t bytes) override {
    ++allocs;
    next += 64;
    void* p = reinterpret_cast<void*>(next);
    live[p] = bytes;
    return p;
  }
  void deallocate(void* p, size_t bytes) override {
    ++frees;
    auto it = live.find(p);
    if (it == live.end()) {
      ++bad_frees;
      return;
    }
    if (it->second != bytes) ++bad_frees;
    live.erase(it);
  }
  Device device() const override { return Device::cuda; }

  int allocs = 0, frees = 0, bad_frees = 0;
  std::map<void*, size_t> live;

 private:
  uintptr_t next = 0x100000;
};

template <typename F>
Error catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no h3s::Error thrown";
  return Error(ErrorKind::internal, "");
}

TEST(ArenaHostMemory, AlignedAndWritable) {
  HostMemory m;
  EXPECT_EQ(m.device(), Device::host);
  for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(65), size_t(4097)}) {
    void* p = m.allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    auto* c = static_cast<unsigned char*>(p);
    for (size_t i = 0; i < bytes; ++i) c[i] = static_cast<unsigned char>(i);
    m.deallocate(p, bytes);
  }
}

TEST(ArenaHostMemory, HugeRequestThrowsInsteadOfWrapping) {
  HostMemory m;
  // (bytes + 63) would wrap to a tiny allocation.
  EXPECT_THROW(m.allocate(SIZE_MAX), std::bad_alloc);
  EXPECT_THROW(m.allocate(SIZE_MAX - 10), std::bad_alloc);
  EXPECT_THROW(m.allocate(SIZE_MAX - 62), std::bad_alloc);
}

TEST(ArenaAccounting, AllocateFreeAndPeak) {
  FakeMemory mem;
  Arena a(mem, 0);
  EXPECT_EQ(a.device(), Device::cuda);
  EXPECT_EQ(a.budget(), 0u);
  EXPECT_EQ(a.allocated(), 0u);
  EXPECT_EQ(a.peak(), 0u);
  {
    Buffer b1 = a.allocate(100, "b1");
    EXPECT_TRUE(b1);
    EXPECT_EQ(b1.bytes(), 100u);
    EXPECT_EQ(a.allocated(), 100u);
    Buffer b2 = a.allocate(250, "b2");
    EXPECT_EQ(a.allocated(), 350u);
    EXPECT_EQ(a.peak(), 350u);
    EXPECT_NE(b1.data(), b2.data());
    b1.reset();
    EXPECT_FALSE(b1);
    EXPECT_EQ(b1.data(), nullptr);
    EXPECT_EQ(b1.bytes(), 0u);
    EXPECT_EQ(a.allocated(), 250u);
    EXPECT_EQ(a.peak(), 350u);
    b1.reset();  // second reset is a no-op
    EXPECT_EQ(a.allocated(), 250u);
    Buffer b3 = a.allocate(50, "b3");
    EXPECT_EQ(a.allocated(), 300u);
    EXPECT_EQ(a.peak(), 350u);  // 300 < 350
    Buffer b4 = a.allocate(100, "b4");
    EXPECT_EQ(a.peak(), 400u);
  }
  EXPECT_EQ(a.allocated(), 0u);
  EXPECT_EQ(a.peak(), 400u);
  EXPECT_EQ(mem.allocs, 4);
  EXPECT_EQ(mem.frees, 4);
  EXPECT_EQ(mem.bad_frees, 0);
  EXPECT_TRUE(mem.live.empty());

  Buffer keep = a.allocate(10, "keep");
  a.reset_peak();
  EXPECT_EQ(a.peak(), 10u);
  { Buffer t = a.allocate(5, "t"); }
  EXPECT_EQ(a.peak(), 15u);
}

TEST(ArenaAccounting, ZeroByteAllocation) {
  HostMemory mem;
  Arena a(mem, 100);
  Buffer b = a.allocate(0, "empty");
  EXPECT_EQ(b.bytes(), 0u);
  EXPECT_EQ(a.allocated(), 0u);
  b.reset();
  EXPECT_EQ(a.allocated(), 0u);
}

TEST(ArenaBudget, ExceededThrowsOutOfMemory) {
  FakeMemory mem;
  Arena a(mem, 1000);
  EXPECT_EQ(a.budget(), 1000u);
  Buffer b = a.allocate(600, "first");
  const Error e = catch_error([&] { Buffer c = a.allocate(401, "attention scores"); });
  EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
  const std::string msg = e.what();
  EXPECT_NE(msg.find("attention scores"), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(1000)), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(401)), std::string::npos) << msg;
  EXPECT_NE(msg.find(format_bytes(600)), std::string::npos) << msg;
  // The failed request changed nothing.
  EXPECT_EQ(a.allocated(), 600u);
  EXPECT_EQ(a.peak(), 600u);
  EXPECT_EQ(mem.allocs, 1);
  // Filling the budget exactly is allowed.
  Buffer c = a.allocate(400, "exact fit");
  EXPECT_EQ(a.allocated(), 1000u);
  EXPECT_THROW(a.allocate(1, "one more"), Error);
  c.reset();
  Buffer d = a.allocate(400, "after free");
  EXPECT_EQ(a.allocated(), 1000u);
}

TEST(ArenaBudget, MessageNamesLargeBudget) {
  FakeMemory mem;
  const size_t budget = size_t(3) << 30;
  Arena a(mem, budget);
  const Error e = catch_error([&] { a.allocate(size_t(4) << 30, "mlp hidden"); });
  EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
  const std::string msg = e.what();
  EXPECT_NE(msg.find("mlp hidden"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3.00 GiB"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4.00 GiB"), std::string::npos) << msg;
}

TEST(ArenaBudget, HugeRequestDoesNotWrapTheBudgetCheck) {
  FakeMemory mem;
  Arena a(mem, 1000);
  Buffer b = a.allocate(100, "b");
  // allocated + SIZE_MAX wraps to 99, which must not pass for "fits".
  for (size_t bytes : {SIZE_MAX, SIZE_MAX - 50, SIZE_MAX - 99, SIZE_MAX - 100}) {
    const Error e = catch_error([&] { a.allocate(bytes, "huge"); });
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory) << bytes;
  }
  EXPECT_EQ(a.allocated(), 100u);
  EXPECT_EQ(mem.allocs, 1);
}

TEST(ArenaBudget, ZeroMeansUnlimited) {
  FakeMemory mem;
  Arena a(mem, 0);
  std::vector<Buffer> bufs;
  for (int i = 0; i < 8; ++i) bufs.push_back(a.allocate(size_t(1) << 40, "big"));  // 8 TiB fake
  EXPECT_EQ(a.allocated(), size_t(8) << 40);
  EXPECT_EQ(a.peak(), size_t(8) << 40);
  bufs.clear();
  EXPECT_EQ(a.allocated(), 0u);
  EXPECT_EQ(mem.frees, 8);
}

TEST(ArenaBudget, HostUnlimitedHugeRequestThrowsAndLeavesAccounting) {
  HostMemory mem;
  Arena a(mem, 0);
  EXPECT_THROW(a.allocate(SIZE_MAX - 10, "huge"), std::bad_alloc);
  EXPECT_EQ(a.allocated(), 0u);
  EXPECT_EQ(a.peak(), 0u);
}

TEST(ArenaBuffer, MoveSemantics) {
  FakeMemory mem;
  Arena a(mem, 0);
  Buffer b1 = a.allocate(128, "b1");
  void* p = b1.data();
  Buffer b2(std::move(b1));
  EXPECT_FALSE(b1);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b1.data(), nullptr);
  EXPECT_EQ(b1.bytes(), 0u);
  EXPECT_TRUE(b2);
  EXPECT_EQ(b2.data(), p);
  EXPECT_EQ(b2.bytes(), 128u);
  EXPECT_EQ(a.allocated(), 128u);

  // Move-assign into an empty buffer.
  Buffer b3;
  EXPECT_FALSE(b3);
  b3 = std::move(b2);
  EXPECT_FALSE(b2);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b3.data(), p);
  EXPECT_EQ(a.allocated(), 128u);
  EXPECT_EQ(mem.frees, 0);

  // Move-assign over a live buffer releases the old one, once.
  Buffer b4 = a.allocate(64, "b4");
  EXPECT_EQ(a.allocated(), 192u);
  b4 = std::move(b3);
  EXPECT_EQ(a.allocated(), 128u);
  EXPECT_EQ(mem.frees, 1);
  EXPECT_EQ(b4.data(), p);

  // Self-move is harmless.
  Buffer& alias = b4;
  b4 = std::move(alias);
  EXPECT_EQ(b4.data(), p);
  EXPECT_EQ(a.allocated(), 128u);

  // Moved-from buffers release nothing when destroyed or reset.
  b1.reset();
  b2.reset();
  b3.reset();
  EXPECT_EQ(mem.frees, 1);
  EXPECT_EQ(a.allocated(), 128u);
  b4.reset();
  EXPECT_EQ(a.allocated(), 0u);
  EXPECT_EQ(mem.frees, 2);
  EXPECT_EQ(mem.bad_frees, 0);
  EXPECT_TRUE(mem.live.empty());

  // Buffers survive being moved around inside a vector (reallocation).
  std::vector<Buffer> v;
  for (int i = 0; i < 50; ++i) v.push_back(a.allocate(size_t(i + 1), "v"));
  EXPECT_EQ(a.allocated(), size_t(50 * 51 / 2));
  v.erase(v.begin(), v.begin() + 10);
  EXPECT_EQ(a.allocated(), size_t(50 * 51 / 2 - 10 * 11 / 2));
  v.clear();
  EXPECT_EQ(a.allocated(), 0u);
  EXPECT_EQ(mem.bad_frees, 0);
  EXPECT_TRUE(mem.live.empty());
}

TEST(ArenaTensor, ShapeStridesAndBytes) {
  HostMemory mem;
  Arena a(mem, 0);
  OwnedTensor t = a.tensor(DType::bf16, {3, 5}, "x");
  ASSERT_TRUE(t);
  EXPECT_EQ(t.buffer.bytes(), 3u * 5u * 2u);
  EXPECT_EQ(a.allocated(), 30u);
  EXPECT_EQ(t.view.data, t.buffer.data());
  EXPECT_EQ(t.view.dtype, DType::bf16);
  EXPECT_EQ(t.view.device, Device::host);
  EXPECT_EQ(t.view.rank, 2);
  EXPECT_EQ(t.view.shape[0], 3);
  EXPECT_EQ(t.view.shape[1], 5);
  EXPECT_EQ(t.view.stride[0], 5);
  EXPECT_EQ(t.view.stride[1], 1);
  EXPECT_EQ(t.view.numel(), 15);
  EXPECT_TRUE(t.view.is_contiguous());

  OwnedTensor u = a.tensor(DType::f32, {2, 3, 4, 5}, "u");
  EXPECT_EQ(u.buffer.bytes(), 2u * 3u * 4u * 5u * 4u);
  EXPECT_EQ(u.view.rank, 4);
  EXPECT_EQ(u.view.stride[0], 60);
  EXPECT_EQ(u.view.stride[1], 20);
  EXPECT_EQ(u.view.stride[2], 5);
  EXPECT_EQ(u.view.stride[3], 1);
  // The memory is really usable over the whole view.
  float* f = u.view.ptr<float>();
  for (int64_t i = 0; i < u.view.numel(); ++i) f[i] = float(i);
  EXPECT_EQ(u.view.row<float>(1)[59], 119.0f);

  OwnedTensor v = a.tensor(DType::e2m1x2, {7}, "packed");
  EXPECT_EQ(v.buffer.bytes(), 7u);
  EXPECT_EQ(v.view.rank, 1);
  EXPECT_EQ(v.view.stride[0], 1);

  OwnedTensor z = a.tensor(DType::f32, {0, 8}, "empty");
  EXPECT_EQ(z.buffer.bytes(), 0u);
  EXPECT_EQ(z.view.numel(), 0);

  EXPECT_EQ(a.allocated(), 30u + 480u + 7u);
  t.reset();
  EXPECT_FALSE(t);
  EXPECT_EQ(t.view.data, nullptr);
  EXPECT_EQ(t.view.rank, 0);
  EXPECT_EQ(a.allocated(), 480u + 7u);
}

TEST(ArenaTensor, DeviceComesFromMemoryResource) {
  FakeMemory mem;
  Arena a(mem, 0);
  OwnedTensor t = a.tensor(DType::f16, {4, 4}, "dev");
  EXPECT_EQ(t.view.device, Device::cuda);
  EXPECT_EQ(t.buffer.bytes(), 32u);
}

TEST(ArenaTensor, BadShapesThrowAndLeakNothing) {
  FakeMemory mem;
  Arena a(mem, 0);
  const Error neg = catch_error([&] { a.tensor(DType::f32, {4, -1}, "negative"); });
  EXPECT_EQ(neg.kind(), ErrorKind::invalid_argument);
  EXPECT_NE(std::string(neg.what()).find("negative"), std::string::npos);
  EXPECT_EQ(a.allocated(), 0u);
  // Rank 0 and rank 5 are rejected by the view; the buffer is released.
  EXPECT_THROW(a.tensor(DType::f32, {}, "rank0"), Error);
  EXPECT_THROW(a.tensor(DType::f32, {1, 1, 1, 1, 1}, "rank5"), Error);
  EXPECT_EQ(a.allocated(), 0u);
  EXPECT_EQ(mem.allocs, mem.frees);
  // Element counts whose byte size overflows must not wrap to a small buffer.
  const int64_t big = int64_t(1) << 32;
  const Error ovf = catch_error([&] { a.tensor(DType::f32, {big, big}, "overflow"); });
  EXPECT_EQ(ovf.kind(), ErrorKind::out_of_memory);
  EXPECT_NE(std::string(ovf.what()).find("overflow"), std::string::npos);
  EXPECT_THROW(a.tensor(DType::f32, {INT64_MAX, 2}, "ovf2"), Error);
  EXPECT_THROW(a.tensor(DType::f32, {int64_t(1) << 62, 1}, "ovf3"), Error);  // bytes wrap
  EXPECT_THROW(a.tensor(DType::u8, {big, big, 2}, "ovf4"), Error);
  EXPECT_EQ(a.allocated(), 0u);
  EXPECT_EQ(mem.allocs, mem.frees);
  // A zero dimension makes a huge shape empty, not an overflow.
  OwnedTensor z = a.tensor(DType::f32, {big, big, 0}, "zero");
  EXPECT_EQ(z.buffer.bytes(), 0u);
}

TEST(ArenaLedger, InitialEntry) {
  FakeMemory mem;
  Arena a(mem, 0);
  const std::vector<LedgerEntry> l = a.ledger();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].block, -1);
  EXPECT_EQ(l[0].phase, Phase::setup);
  EXPECT_EQ(l[0].allocated_at_start, 0u);
  EXPECT_EQ(l[0].peak, 0u);
  EXPECT_EQ(l[0].allocated_at_end, 0u);
}

TEST(ArenaLedger, PhasesRecordStartPeakEnd) {
  FakeMemory mem;
  Arena a(mem, 0);
  Buffer weights = a.allocate(100, "setup");  // setup: 0 -> 100

  a.mark(-1, Phase::embed);
  Buffer x = a.allocate(40, "x");  // embed: 100 -> 140, peak 140

  a.mark(0, Phase::attn);
  {
    Buffer scores = a.allocate(500, "scores");  // peak 640, freed inside the phase
  }
  Buffer attn_out = a.allocate(10, "attn out");  // 150

  a.mark(0, Phase::mlp);
  x.reset();  // 110, frees don't raise the peak
  {
    Buffer hidden = a.allocate(60, "hidden");  // peak 170 in this phase only
  }

  a.mark(1, Phase::attn);  // nothing happens in this (open) phase

  const std::vector<LedgerEntry> l = a.ledger();
  ASSERT_EQ(l.size(), 5u);

  EXPECT_EQ(l[0].block, -1);
  EXPECT_EQ(l[0].phase, Phase::setup);
  EXPECT_EQ(l[0].allocated_at_start, 0u);
  EXPECT_EQ(l[0].peak, 100u);
  EXPECT_EQ(l[0].allocated_at_end, 100u);

  EXPECT_EQ(l[1].block, -1);
  EXPECT_EQ(l[1].phase, Phase::embed);
  EXPECT_EQ(l[1].allocated_at_start, 100u);
  EXPECT_EQ(l[1].peak, 140u);
  EXPECT_EQ(l[1].allocated_at_end, 140u);

  EXPECT_EQ(l[2].block, 0);
  EXPECT_EQ(l[2].phase, Phase::attn);
  EXPECT_EQ(l[2].allocated_at_start, 140u);
  EXPECT_EQ(l[2].peak, 640u);
  EXPECT_EQ(l[2].allocated_at_end, 150u);

  EXPECT_EQ(l[3].block, 0);
  EXPECT_EQ(l[3].phase, Phase::mlp);
  EXPECT_EQ(l[3].allocated_at_start, 150u);
  EXPECT_EQ(l[3].peak, 170u);  // not 640: that peak belongs to attn
  EXPECT_EQ(l[3].allocated_at_end, 110u);

  EXPECT_EQ(l[4].block, 1);
  EXPECT_EQ(l[4].phase, Phase::attn);
  EXPECT_EQ(l[4].allocated_at_start, 110u);
  EXPECT_EQ(l[4].peak, 110u);  // a phase's peak is at least what was live at its start
  EXPECT_EQ(l[4].allocated_at_end, 110u);

  EXPECT_EQ(a.peak(), 640u);

  // The open entry's end tracks "now".
  attn_out.reset();
  EXPECT_EQ(a.ledger().back().allocated_at_end, 100u);
  Buffer more = a.allocate(1000, "more");
  EXPECT_EQ(a.ledger().back().allocated_at_end, 1100u);
  EXPECT_EQ(a.ledger().back().peak, 1100u);
  // ...and ledger() is a snapshot: closed entries are unchanged.
  EXPECT_EQ(a.ledger()[3].allocated_at_end, 110u);
  EXPECT_EQ(a.ledger()[3].peak, 170u);
}

TEST(ArenaLedger, ClearLedgerStartsFresh) {
  FakeMemory mem;
  Arena a(mem, 0);
  Buffer b = a.allocate(300, "b");
  a.mark(3, Phase::kv);
  { Buffer t = a.allocate(700, "t"); }
  a.mark(3, Phase::final);
  ASSERT_EQ(a.ledger().size(), 3u);

  a.clear_ledger();
  std::vector<LedgerEntry> l = a.ledger();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_EQ(l[0].block, -1);
  EXPECT_EQ(l[0].phase, Phase::setup);
  EXPECT_EQ(l[0].allocated_at_start, 300u);
  EXPECT_EQ(l[0].peak, 300u);  // the 1000 peak before the clear is forgotten
  EXPECT_EQ(l[0].allocated_at_end, 300u);
  EXPECT_EQ(a.peak(), 1000u);  // the arena-wide peak is separate

  { Buffer t = a.allocate(50, "t"); }
  a.mark(4, Phase::refiner);
  l = a.ledger();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0].peak, 350u);
  EXPECT_EQ(l[0].allocated_at_end, 300u);
  EXPECT_EQ(l[1].block, 4);
  EXPECT_EQ(l[1].phase, Phase::refiner);
  EXPECT_EQ(l[1].allocated_at_start, 300u);
}

TEST(ArenaLedger, PhaseNames) {
  EXPECT_EQ(phase_name(Phase::setup), "setup");
  EXPECT_EQ(phase_name(Phase::embed), "embed");
  EXPECT_EQ(phase_name(Phase::refiner), "refiner");
  EXPECT_EQ(phase_name(Phase::kv), "kv");
  EXPECT_EQ(phase_name(Phase::attn), "attn");
  EXPECT_EQ(phase_name(Phase::mlp), "mlp");
  EXPECT_EQ(phase_name(Phase::final), "final");
  EXPECT_EQ(phase_name(static_cast<Phase>(99)), "?");
}

TEST(ArenaFormatBytes, Units) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1), "1 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(10 * 1024), "10.0 KiB");
  EXPECT_EQ(format_bytes(size_t(1) << 20), "1.00 MiB");
  EXPECT_EQ(format_bytes(size_t(5) << 19), "2.50 MiB");
  EXPECT_EQ(format_bytes(size_t(1) << 30), "1.00 GiB");
  EXPECT_EQ(format_bytes((size_t(3) << 30) + (size_t(1) << 29)), "3.50 GiB");
  EXPECT_EQ(format_bytes(size_t(141) << 30), "141.00 GiB");
  EXPECT_EQ(format_bytes(size_t(1) << 40), "1024.00 GiB");
}

}  // namespace
}  // namespace h3s
