// ResidualRows (exec/residual_rows.hpp) with x host-staged on the CPU
// backend: whatever the order of fetches, and whether the order was
// announced, every lease sees x's current rows and every store lands; an
// announced fetch's copy is queued by the fetch before it (one copy per
// fetch, no copy wasted), except where the store in between would make it
// stale; a fetch larger than a slot takes the arena's rows.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "core/rng.hpp"
#include "exec/residual_rows.hpp"

namespace h3s::test {
namespace {

constexpr int64_t kCols = 24;

struct Staged {
  std::unique_ptr<Backend> be = make_cpu_backend(1);
  HostMemory mem;
  Arena device{mem, 0}, host{mem, 0};
  std::unique_ptr<StageQueue> queue = be->make_stage_queue();
  OwnedTensor x;
  std::vector<uint16_t> model;  // what x must hold

  explicit Staged(int64_t rows) {
    x = host.tensor(DType::bf16, {rows, kCols}, "x");
    model.resize(size_t(rows * kCols));
    for (size_t i = 0; i < model.size(); ++i) model[i] = uint16_t(i * 7 + 3);
    std::memcpy(x.view.data, model.data(), model.size() * 2);
  }
  static uint16_t* row(const Tensor& t, int64_t r) {
    return static_cast<uint16_t*>(t.data) + r * t.row_stride();
  }
  // The lease holds x's current rows r.
  ::testing::AssertionResult holds(const ResidualRows::Lease& l, RowRange r) const {
    for (int64_t i = 0; i < r.size(); ++i)
      if (std::memcmp(row(l.view, i), &model[size_t((r.begin + i) * kCols)], kCols * 2) != 0)
        return ::testing::AssertionFailure() << "row " << r.begin + i << " is stale";
    return ::testing::AssertionSuccess();
  }
  // Writes a new value into every row of the lease, as the ops would.
  void update(const ResidualRows::Lease& l, RowRange r, uint16_t salt) {
    for (int64_t i = 0; i < r.size(); ++i)
      for (int64_t j = 0; j < kCols; ++j) {
        const uint16_t v = uint16_t((r.begin + i) * 131 + j + salt);
        row(l.view, i)[j] = v;
        model[size_t((r.begin + i) * kCols + j)] = v;
      }
  }
  bool x_equals_model() const {
    return std::memcmp(x.view.data, model.data(), model.size() * 2) == 0;
  }
};

// Runs `accesses` through `rows`, updating the stored ones; returns the
// bytes copied in when each fetch returned.
std::vector<uint64_t> run(Staged& s, ResidualRows& rows,
                          const std::vector<ResidualRows::Access>& accesses, uint16_t salt) {
  std::vector<uint64_t> copied_in;
  for (const ResidualRows::Access& a : accesses) {
    const ResidualRows::Lease l = rows.fetch(a.rows, a.load);
    if (a.load) {
      EXPECT_TRUE(s.holds(l, a.rows));
    }
    copied_in.push_back(s.queue->traffic().to_device_bytes);
    if (a.store) {
      s.update(l, a.rows, salt++);
      rows.store(l, a.rows);
    }
  }
  return copied_in;
}

uint64_t bytes(RowRange r) {
  return uint64_t(r.size() * kCols * 2);
}

TEST(ResidualRows, AnnouncedFetchesAreCopiedOneFetchAhead) {
  Staged s(100);
  const int64_t slot = 30;
  ResidualRows rows(s.x.view, s.device, *s.queue, slot);
  // K/V reads, two query chunks read then updated, two MLP chunks updated.
  const std::vector<ResidualRows::Access> order = {
      {{0, 30}, true, false}, {{30, 60}, true, false}, {{60, 100}, true, false},
      {{0, 25}, true, false}, {{25, 50}, true, false}, {{0, 25}, true, true},
      {{25, 50}, true, true}, {{50, 75}, true, false}, {{75, 100}, true, false},
      {{50, 75}, true, true}, {{75, 100}, true, true}, {{0, 30}, true, true},
      {{30, 60}, true, true}};
  rows.expect(order);
  const std::vector<uint64_t> copied_in = run(s, rows, order, 1);
  EXPECT_TRUE(s.x_equals_model());
  // When fetch i returns, fetch i + 1's rows are already on their way,
  // unless one of the two is larger than a slot ({60, 100}: the synchronous
  // path).
  uint64_t in = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    in += bytes(order[i].rows);
    const bool ahead =
        i + 1 < order.size() && order[i].rows.size() <= slot && order[i + 1].rows.size() <= slot;
    EXPECT_EQ(copied_in[i], in + (ahead ? bytes(order[i + 1].rows) : 0)) << "fetch " << i;
  }
  const StageTraffic t = s.queue->traffic();
  uint64_t out = 0;
  for (const auto& a : order) out += a.store ? bytes(a.rows) : 0;
  EXPECT_EQ(t.to_device_bytes, in);  // nothing copied twice or for nothing
  EXPECT_EQ(t.to_host_bytes, out);
  EXPECT_EQ(s.device.allocated(), ResidualRows::slot_bytes(slot, kCols));
}

TEST(ResidualRows, AStoreOverlappingTheNextFetchIsSeenByIt) {
  Staged s(64);
  ResidualRows rows(s.x.view, s.device, *s.queue, 32);
  // The updated rows [32, 64) are read again right after: their copy in may
  // not start before the store.
  const std::vector<ResidualRows::Access> order = {{{32, 64}, true, true},
                                                   {{16, 48}, true, true},
                                                   {{0, 32}, true, false},
                                                   {{0, 32}, true, true}};
  rows.expect(order);
  const std::vector<uint64_t> copied_in = run(s, rows, order, 5);
  EXPECT_TRUE(s.x_equals_model());
  const uint64_t chunk = bytes({0, 32});
  // Not ahead of an overlapping store; ahead of the read-only fetch 2.
  EXPECT_EQ(copied_in, (std::vector<uint64_t>{chunk, 2 * chunk, 4 * chunk, 4 * chunk}));
  EXPECT_EQ(s.queue->traffic().to_device_bytes, 4 * chunk);
}

TEST(ResidualRows, UnannouncedAndOversizedFetchesStillSeeCurrentRows) {
  Staged s(97);
  ResidualRows rows(s.x.view, s.device, *s.queue, 16);
  Rng rng(3);
  rows.expect({{{0, 16}, true, true}, {{16, 32}, true, true}});
  std::vector<ResidualRows::Access> order;
  for (int i = 0; i < 40; ++i) {
    const int64_t b = int64_t(rng.below(96)), n = 1 + int64_t(rng.below(40));
    order.push_back({{b, std::min<int64_t>(97, b + n)}, rng.below(4) != 0, rng.below(2) != 0});
  }
  order.insert(order.begin(), ResidualRows::Access{{0, 16}, true, true});  // announced, then not
  run(s, rows, order, 9);
  EXPECT_TRUE(s.x_equals_model());
  EXPECT_EQ(s.device.allocated(), ResidualRows::slot_bytes(16, kCols));  // oversized rows returned
}

TEST(ResidualRows, WriteOnlyFetchesTakeASlot) {
  Staged s(50);
  ResidualRows rows(s.x.view, s.device, *s.queue, 20);
  for (const RowRange r : {RowRange{0, 20}, RowRange{20, 40}, RowRange{40, 50}}) {
    const ResidualRows::Lease l = rows.fetch(r, /*load=*/false);
    s.update(l, r, 77);
    rows.store(l, r);
  }
  EXPECT_TRUE(s.x_equals_model());
  EXPECT_EQ(s.queue->traffic().to_device_bytes, 0u);
}

TEST(ResidualRows, SlotsCoverEveryChunkOfTheBlock) {
  for (const auto& [seq, kv, q, mlp, merge] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{1000, 97, 211, 301, 0},
        {1000, 97, 211, 301, 64},
        {5, 16384, 16384, 16384, 512},
        {1000, 0, 0, 0, 0}}) {
    const int64_t slot = ResidualRows::slot_rows_for(seq, kv, q, mlp, merge);
    for (const int64_t span : {seq, seq / 3 + 1})
      for (const ChunkPlan& p : {ChunkPlan::fixed(span, kv, merge), ChunkPlan::balanced(seq, q),
                                 ChunkPlan::fixed(span, mlp, merge)})
        EXPECT_LE(p.largest(), slot) << seq << " " << kv << " " << q << " " << mlp << " " << merge;
    EXPECT_LE(slot, seq);
  }
}

}  // namespace
}  // namespace h3s::test
