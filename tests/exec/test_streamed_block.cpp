// streamed == stock, bit for bit, for every weight format over randomised
// chunk sizes (1 row, primes, tails shorter than any tile), sequence lengths
// and segment layouts, with and without blocked K/V consumption.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "exec/residual_rows.hpp"
#include "exec_fixture.hpp"

namespace h3s::test {
namespace {

struct Case {
  int64_t text, audio_t, frames;
  bool tags, cond;
};

std::vector<uint16_t> run(BlockHarness& h, std::vector<uint16_t> x, const StreamChunks* c) {
  const Tensor t = h.tensor(x);
  if (c)
    run_block_streamed(*h.be, h.arena, h.view(), t, *c);
  else
    run_block_stock(*h.be, h.arena, h.view(), t);
  return x;
}

int64_t pick_chunk(Rng& r, int64_t seq) {
  const int64_t fixed[] = {1, 2, 3, 7, 13, 31, 64, 65, 97, seq - 1, seq, seq + 5};
  if (r.below(3) == 0) return std::max<int64_t>(1, 1 + r.below(seq + 1));
  return std::max<int64_t>(1, fixed[r.below(std::size(fixed))]);
}

class StreamedBlock : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(StreamedBlock, EqualsStockBitForBitOverRandomChunks) {
  const ModelWeights& w = weights_for(GetParam());
  const Case cases[] = {
      {0, 0, 1, false, false},     // a 1-token sequence
      {5, 3, 29, true, false},     // 40 tokens, tag runs in the text
      {17, 11, 103, true, true},   // 144 tokens with a cond frame (prime-ish segments)
      {64, 20, 173, false, true},  // 278 tokens: several attention tiles and a short tail
  };
  Rng rng(42 + uint64_t(GetParam()));
  for (const Case& k : cases) {
    BlockHarness h(w, small_layout(w.config, k.text, k.audio_t, k.frames, k.tags, k.cond));
    const int64_t seq = h.layout.seq_len;
    const std::vector<uint16_t> x0 = h.random_x(seq);
    const std::vector<uint16_t> stock = run(h, x0, nullptr);
    for (int trial = 0; trial < 4; ++trial) {
      StreamChunks c;
      c.q_chunk = pick_chunk(rng, seq);
      c.kv_chunk = pick_chunk(rng, seq);
      c.mlp_chunk = pick_chunk(rng, seq);
      c.kv_block = kAttnKvTile * rng.below(4);
      c.merge_tail_below = rng.below(2) ? 0 : 1 + rng.below(8);
      const std::vector<uint16_t> streamed = run(h, x0, &c);
      EXPECT_TRUE(bits_equal(stock, streamed))
          << fmt::format("seq {} q_chunk {} kv_chunk {} mlp_chunk {} kv_block {} merge {}", seq,
                         c.q_chunk, c.kv_chunk, c.mlp_chunk, c.kv_block, c.merge_tail_below);
    }
    // The streamed block changes x: a test comparing x0 with itself could not fail.
    EXPECT_FALSE(bits_equal(x0, stock));
  }
}

TEST_P(StreamedBlock, OneRowChunksEverywhere) {
  const ModelWeights& w = weights_for(GetParam());
  BlockHarness h(w, small_layout(w.config, 7, 4, 60, true, true));
  const std::vector<uint16_t> x0 = h.random_x(7);
  const StreamChunks ones{1, 1, 1, 128, 0};
  EXPECT_TRUE(bits_equal(run(h, x0, nullptr), run(h, x0, &ones)));
}

TEST_P(StreamedBlock, KvBlockOnOffEqual) {
  const ModelWeights& w = weights_for(GetParam());
  BlockHarness h(w, small_layout(w.config, 30, 16, 300, false, false));  // 362 tokens
  const std::vector<uint16_t> x0 = h.random_x(9);
  const StreamChunks off{100, 128, 77, 0, 0};
  const std::vector<uint16_t> ref = run(h, x0, &off);
  for (int64_t kv_block : {128, 256, 384, 640, 4096}) {
    const StreamChunks on{100, 128, 77, kv_block, 0};
    EXPECT_TRUE(bits_equal(ref, run(h, x0, &on))) << "kv_block " << kv_block;
  }
}

// The host-staged K/V store (kv/kv_staged.hpp) against the stock block: the
// same bits for random chunks, staging tiles and query groups, with the
// store in a second (host) pool whose budget holds exactly the K/V, and the
// traffic the placement predicts: out once, in once per query group (but
// the first, when kv_first_pass attends it during phase 1, which it does
// exactly when every K/V chunk starts on an attention tile).
TEST_P(StreamedBlock, HostStagedKvEqualsStockBitForBit) {
  const ModelWeights& w = weights_for(GetParam());
  Rng rng(7 + uint64_t(GetParam()));
  for (const Case& k : {Case{0, 0, 1, false, false}, Case{17, 11, 103, true, true},
                        Case{64, 20, 173, false, true}, Case{30, 16, 300, false, false}}) {
    BlockHarness h(w, small_layout(w.config, k.text, k.audio_t, k.frames, k.tags, k.cond));
    const int64_t seq = h.layout.seq_len, inner = w.config.inner();
    const std::vector<uint16_t> x0 = h.random_x(seq);
    const std::vector<uint16_t> stock = run(h, x0, nullptr);
    int fused = 0;
    for (int trial = 0; trial < 6; ++trial) {
      HostMemory staging;
      Arena host(staging, size_t(seq) * size_t(inner) * 4);  // K and V, nothing more
      auto queue = h.be->make_stage_queue();
      StreamChunks c;
      c.q_chunk = pick_chunk(rng, seq);
      // Odd trials: tile-aligned K/V chunks (the first pass can fuse).
      c.kv_chunk = trial % 2 ? kAttnKvTile * (1 + rng.below(3)) : pick_chunk(rng, seq);
      c.mlp_chunk = pick_chunk(rng, seq);
      c.kv_block = kAttnKvTile * (1 + rng.below(3));
      c.q_group = 1 + rng.below(4);
      c.merge_tail_below = rng.below(2) ? 0 : 1 + rng.below(8);
      c.kv_host = &host;
      c.kv_queue = queue.get();
      c.kv_first_pass = trial % 4 != 2;
      // Every third trial stages the residual x too (exec/residual_rows.hpp).
      const bool stage_x = trial % 3 == 1;
      std::vector<uint16_t> staged = x0;
      if (stage_x) {
        HostMemory x_memory;
        Arena x_host(x_memory, 0);
        OwnedTensor hx = x_host.tensor(DType::bf16, {seq, w.config.hidden}, "x (host)");
        std::memcpy(hx.view.data, x0.data(), x0.size() * 2);
        ResidualRows rows(hx.view, h.arena, *queue,
                          ResidualRows::slot_rows_for(seq, c.kv_chunk, c.q_chunk, c.mlp_chunk,
                                                      c.merge_tail_below));
        run_block_streamed(*h.be, h.arena, h.view(), rows, c);
        std::memcpy(staged.data(), hx.view.data, x0.size() * 2);
      } else {
        staged = run(h, x0, &c);
      }
      const std::string what = fmt::format(
          "seq {} q_chunk {} kv_chunk {} kv_block {} q_group {} kv_first_pass {} x staged {}", seq,
          c.q_chunk, c.kv_chunk, c.kv_block, c.q_group, c.kv_first_pass, stage_x);
      EXPECT_TRUE(bits_equal(stock, staged)) << what;
      const std::vector<RowRange> kv_chunks =
          ChunkPlan::fixed(seq, c.kv_chunk, c.merge_tail_below).chunks;
      const bool first_in_phase1 =
          c.kv_first_pass && std::all_of(kv_chunks.begin(), kv_chunks.end(),
                                         [](RowRange r) { return r.begin % kAttnKvTile == 0; });
      fused += first_in_phase1 ? 1 : 0;
      const std::vector<RowRange> q_chunks = ChunkPlan::balanced(seq, c.q_chunk).chunks;
      const int64_t n_q = int64_t(q_chunks.size());
      const int64_t passes = (n_q + c.q_group - 1) / c.q_group - (first_in_phase1 ? 1 : 0);
      const uint64_t store = uint64_t(seq) * uint64_t(inner) * 4;
      // A staged x: out after the attention and the MLP; in for phase 1, the
      // MLP, and once a query chunk in groups of one (the group attended in
      // phase 1 fetches its rows again for the residual), twice otherwise.
      const uint64_t x_row = uint64_t(w.config.hidden) * 2, x_bytes = uint64_t(seq) * x_row;
      const uint64_t x_out = stage_x ? 2 * x_bytes : 0;
      const uint64_t x_in = !stage_x ? 0
                            : c.q_group == 1
                                ? 3 * x_bytes + (first_in_phase1 ? q_chunks[0].size() * x_row : 0)
                                : 4 * x_bytes;
      const StageTraffic t = queue->traffic();
      EXPECT_EQ(t.to_host_bytes, store + x_out) << what;
      EXPECT_EQ(t.to_device_bytes, store * uint64_t(passes) + x_in) << what;
      EXPECT_EQ(host.allocated(), 0u) << what;  // the store is gone with its block
      EXPECT_EQ(host.peak(), store) << what;
    }
    EXPECT_GE(fused, 3) << "the first pass ran in phase 1 in too few trials";
  }
}

TEST_P(StreamedBlock, HostStagedKvNeedsAWholeTile) {
  const ModelWeights& w = weights_for(GetParam());
  BlockHarness h(w, small_layout(w.config, 3, 2, 90, false, false));
  std::vector<uint16_t> x = h.random_x(3);
  HostMemory staging;
  Arena host(staging, 0);
  auto queue = h.be->make_stage_queue();
  for (const int64_t kv_block : {0, 100}) {
    StreamChunks bad{16, 16, 16, kv_block, 0};
    bad.kv_host = &host;
    bad.kv_queue = queue.get();
    try {
      run_block_streamed(*h.be, h.arena, h.view(), h.tensor(x), bad);
      FAIL() << "kv_block " << kv_block << " was accepted for a host-staged store";
    } catch (const Error& e) {
      EXPECT_NE(
          std::string(e.what()).find(fmt::format("kv_block = {} must be a positive", kv_block)),
          std::string::npos)
          << e.what();
    }
  }
}

TEST_P(StreamedBlock, MisalignedKvBlockIsRejected) {
  const ModelWeights& w = weights_for(GetParam());
  BlockHarness h(w, small_layout(w.config, 3, 2, 90, false, false));
  std::vector<uint16_t> x = h.random_x(3);
  const StreamChunks bad{16, 16, 16, 100, 0};
  try {
    run_block_streamed(*h.be, h.arena, h.view(), h.tensor(x), bad);
    FAIL() << "kv_block 100 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_block = 100"), std::string::npos) << e.what();
  }
}

TEST_P(StreamedBlock, DeterministicAcrossRunsAndThreadCounts) {
  const ModelWeights& w = weights_for(GetParam());
  BlockHarness h(w, small_layout(w.config, 9, 5, 77, true, false));
  const std::vector<uint16_t> x0 = h.random_x(11);
  const StreamChunks c{19, 23, 29, 128, 0};
  const std::vector<uint16_t> a = run(h, x0, &c);
  h.be = make_cpu_backend(1);
  EXPECT_TRUE(bits_equal(a, run(h, x0, &c)));
}

INSTANTIATE_TEST_SUITE_P(Formats, StreamedBlock,
                         ::testing::Values(WeightFormat::bf16, WeightFormat::int8,
                                           WeightFormat::w4a8, WeightFormat::nvfp4),
                         [](const auto& p) { return std::string(format_name(p.param)); });

}  // namespace
}  // namespace h3s::test
