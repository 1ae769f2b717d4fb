// The rank-parallel block on simulated ranks (src/dist/sp_block.hpp):
// Ulysses, K/V all-gather and the state-passing ring against the one-rank
// stock and streamed blocks, bit for bit, at 1-4 ranks. The splits and the
// communicator are tested in test_rank_communicator.cpp.
//
// Each simulated rank gets its own CPU backend and arena, as each GPU has its
// own: the CPU backend's thread pool runs one parallel_for at a time (a
// single job slot) and the arena's accounting is unsynchronised, so neither
// may be shared between rank threads. Weights, modulation rows and the RoPE
// table are shared read-only.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <map>
#include <string>

#include "dist/local_communicator.hpp"
#include "dist/rank_split.hpp"
#include "dist/sp_block.hpp"
#include "exec_fixture.hpp"

namespace h3s::test {
namespace {
// ---- the rank-parallel block ------------------------------------------------

// The CPU backend, except that a finished attention output exposes the fp32
// state it came from: each value is one of 256 exact bf16 values picked by a
// hash of bits(acc / l). Any difference in the state (another key order or
// key tiling) then changes the block's output, not only the rare one that
// survives rounding to bf16, so a ring that broke invariant 2 would fail.
class StateRevealingBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu+reveal-state"; }
  Device device() const override { return Device::host; }
  void rms_norm_mod(const Tensor& x, const Tensor& gamma, float eps, const ModTable* mod,
                    std::span<const ModRun> runs, const Tensor& out) override {
    cpu_->rms_norm_mod(x, gamma, eps, mod, runs, out);
  }
  void linear(const Tensor& x, const QuantLinear& w, const Tensor& y, RowRange features) override {
    cpu_->linear(x, w, y, features);
  }
  void swiglu_linear(const Tensor& f, const QuantLinear& w, const Tensor& y) override {
    cpu_->swiglu_linear(f, w, y);
  }
  void qk_norm_rope(const Tensor& t, const Tensor& w, const Tensor& rope, float eps,
                    int64_t rot_dim) override {
    cpu_->qk_norm_rope(t, w, rope, eps, rot_dim);
  }
  void attn_state_reset(AttnState& s) override { cpu_->attn_state_reset(s); }
  void attention(const Tensor& q, const KvView& kv, RowRange keys, AttnState& s) override {
    cpu_->attention(q, kv, keys, s);
  }
  void attn_state_finish(const AttnState& s, const Tensor& out) override {
    cpu_->attn_state_finish(s, out);  // its argument checks
    const int64_t hd = s.head_dim;
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t h = 0; h < s.heads; ++h) {
        const float l = s.l.view.ptr<float>()[r * s.heads + h];
        const float* acc = s.acc.view.ptr<float>() + (r * s.heads + h) * hd;
        for (int64_t d = 0; d < hd; ++d) {
          const uint32_t hash = (std::bit_cast<uint32_t>(acc[d] / l) * 2654435761u) >> 24;
          out.row<uint16_t>(r)[h * hd + d] = f32_to_bf16(float(hash) / 256.0f - 0.5f).bits;
        }
      }
  }
  void gated_residual(const Tensor& x, const Tensor& y, const Tensor& gate,
                      std::span<const ModRun> runs) override {
    cpu_->gated_residual(x, y, gate, runs);
  }
  void add_residual(const Tensor& x, const Tensor& y) override { cpu_->add_residual(x, y); }
  void silu(const Tensor& x, const Tensor& y) override { cpu_->silu(x, y); }
  void convert(const Tensor& x, const Tensor& y) override { cpu_->convert(x, y); }
  void copy(const Tensor& x, const Tensor& y) override { cpu_->copy(x, y); }
  void scale(const Tensor& x, float alpha) override { cpu_->scale(x, alpha); }
  std::unique_ptr<WeightStore> make_weight_store(std::string n, size_t capacity) override {
    return cpu_->make_weight_store(std::move(n), capacity);
  }
  QuantLinear prepare(const QuantLinear& src, Residency r, WeightStore& store) override {
    return cpu_->prepare(src, r, store);
  }
  WeightArray<uint16_t> prepare(const WeightArray<uint16_t>& src, Residency r,
                                WeightStore& store) override {
    return cpu_->prepare(src, r, store);
  }
  size_t prepared_bytes(const QuantLinear& src, Residency r) const override {
    return cpu_->prepared_bytes(src, r);
  }
  size_t prepared_bytes(const WeightArray<uint16_t>& src, Residency r) const override {
    return cpu_->prepared_bytes(src, r);
  }
  MemoryResource& host_staging_memory() override { return cpu_->host_staging_memory(); }
  std::unique_ptr<StageQueue> make_stage_queue() override { return cpu_->make_stage_queue(); }
  void upload(const void* host, const Tensor& dst) override { cpu_->upload(host, dst); }
  void download(const Tensor& src, void* host) override { cpu_->download(src, host); }

 private:
  std::unique_ptr<Backend> cpu_ = make_cpu_backend(1);
};

// A rank's backend (or the one-rank run's): one thread, as ranks are threads.
std::unique_ptr<Backend> make_backend(bool reveal_state) {
  if (reveal_state) return std::make_unique<StateRevealingBackend>();
  return make_cpu_backend(1);
}

// The micro model with `heads` heads (hidden stays 256; inner = heads * 128).
const ModelWeights& weights_with_heads(int64_t heads, WeightFormat f) {
  static std::map<std::pair<int64_t, int>, std::unique_ptr<ModelWeights>> cache;
  auto& slot = cache[{heads, int(f)}];
  if (!slot) {
    ModelConfig c = micro_config();
    c.heads = heads;
    c.blocks = 1;
    slot = std::make_unique<ModelWeights>(ModelWeights::random(c, f, 99));
  }
  return *slot;
}

// The block on `ranks` simulated ranks, each holding only its rows of x;
// `peaks` (when given) gets each rank's arena peak.
std::vector<uint16_t> run_ranks(const BlockHarness& h, const std::vector<uint16_t>& x0, int ranks,
                                const SpOptions& o, BlockPhases phases = BlockPhases::all,
                                std::vector<size_t>* peaks = nullptr) {
  const bool reveal_state = h.be->name() == "cpu+reveal-state";
  const int64_t seq = h.layout.seq_len, hidden = h.w->config.hidden;
  const BlockView b = h.view();
  std::vector<uint16_t> out(x0.size());
  if (peaks) peaks->assign(size_t(ranks), 0);
  run_local_ranks(ranks, [&](Communicator& comm) {
    HostMemory memory;
    Arena arena(memory, 0);
    const std::unique_ptr<Backend> be = make_backend(reveal_state);
    const RowRange rows = sp_rows(o.attention, seq, comm.size(), comm.rank());
    std::vector<uint16_t> mine(x0.begin() + rows.begin * hidden, x0.begin() + rows.end * hidden);
    const Tensor xr = Tensor::contiguous(mine.data(), DType::bf16, {rows.size(), hidden});
    run_block_sp(*be, arena, comm, b, xr, seq, o, phases);
    std::copy(mine.begin(), mine.end(), out.begin() + rows.begin * hidden);  // disjoint rows
    if (peaks) (*peaks)[size_t(comm.rank())] = arena.peak();                 // a slot per rank
  });
  return out;
}

std::vector<uint16_t> run_one_rank(BlockHarness& h, std::vector<uint16_t> x,
                                   const StreamChunks* chunks = nullptr,
                                   BlockPhases phases = BlockPhases::all) {
  if (chunks)
    run_block_streamed(*h.be, h.arena, h.view(), h.tensor(x), *chunks, phases);
  else
    run_block_stock(*h.be, h.arena, h.view(), h.tensor(x), phases);
  return x;
}

const char* mode_name(SpAttention a) {
  return a == SpAttention::ulysses ? "ulysses" : a == SpAttention::kv_gather ? "kv_gather" : "ring";
}

struct Case {
  int64_t text, audio_t, frames;
  bool tags, cond;
};

// Chunk sizes of the rank-parallel block (SpOptions) and of the one-rank
// streamed block it is compared with.
struct Chunks {
  int64_t q = 0, kv = 0, mlp = 0, ring_q = 0;
  SpOptions sp(SpAttention mode) const {
    return {
        .attention = mode, .q_chunk = q, .kv_chunk = kv, .mlp_chunk = mlp, .ring_q_chunk = ring_q};
  }
  StreamChunks streamed() const { return {.q_chunk = q, .kv_chunk = kv, .mlp_chunk = mlp}; }
};

// Every mode at 1-4 ranks equals the stock block (and the streamed one) bit
// for bit, on lengths of one row per rank, primes, lengths not divisible by
// the rank count and several key tiles per ring shard.
void expect_modes_equal_one_rank(const ModelWeights& w, std::span<const Case> cases,
                                 std::span<const SpAttention> modes, bool reveal_state = true,
                                 const Chunks& c = {}) {
  for (const Case& k : cases) {
    BlockHarness h(w, small_layout(w.config, k.text, k.audio_t, k.frames, k.tags, k.cond));
    h.be = make_backend(reveal_state);
    const int64_t seq = h.layout.seq_len;
    const std::vector<uint16_t> x0 = h.random_x(uint64_t(seq) + 5);
    const std::vector<uint16_t> stock = run_one_rank(h, x0);
    const StreamChunks chunks{.q_chunk = 37, .kv_chunk = 50, .mlp_chunk = 23, .kv_block = 128};
    ASSERT_TRUE(bits_equal(stock, run_one_rank(h, x0, &chunks))) << "seq " << seq;
    EXPECT_FALSE(bits_equal(x0, stock));  // the comparison below can fail
    for (SpAttention mode : modes)
      for (int ranks = 1; ranks <= 4; ++ranks) {
        const std::vector<uint16_t> sp = run_ranks(h, x0, ranks, c.sp(mode));
        EXPECT_TRUE(bits_equal(stock, sp))
            << fmt::format("{} at {} ranks, seq {}, {} heads, chunks q {} kv {} mlp {} ring_q {}",
                           mode_name(mode), ranks, seq, w.config.heads, c.q, c.kv, c.mlp, c.ring_q);
      }
  }
}

constexpr Case kLengths[] = {
    {0, 0, 2, false, false},      // 2 rows: one a rank at 2, fewer rows than ranks at 3-4
    {0, 0, 3, false, false},      // 3 rows
    {0, 0, 4, false, false},      // 4 rows
    {5, 3, 29, true, false},      // 40 rows, tag runs in the text
    {7, 0, 124, false, false},    // 131 rows (prime; a partial second key tile)
    {30, 16, 530, false, false},  // 592 rows: several key tiles per ring shard
};

TEST(RankParallel, UlyssesEqualsOneRankBitForBit) {
  const SpAttention modes[] = {SpAttention::ulysses};
  expect_modes_equal_one_rank(weights_for(WeightFormat::bf16), kLengths, modes);
}

TEST(RankParallel, KvGatherEqualsOneRankBitForBit) {
  const SpAttention modes[] = {SpAttention::kv_gather};
  expect_modes_equal_one_rank(weights_for(WeightFormat::bf16), kLengths, modes);
}

TEST(RankParallel, RingEqualsOneRankBitForBit) {
  const SpAttention modes[] = {SpAttention::ring};
  expect_modes_equal_one_rank(weights_for(WeightFormat::bf16), kLengths, modes);
}

// Heads not divisible by the rank count: 4 heads are 2/1/1 on 3 ranks, and
// the micro model's 2 heads leave a rank without a head at 3-4 ranks; whole
// and chunked (Ulysses' rounds carry each peer's width).
TEST(RankParallel, UnevenHeadSplitsEqualOneRankBitForBit) {
  const Case cases[] = {{0, 0, 3, false, false}, {17, 11, 103, true, true}};
  const SpAttention modes[] = {SpAttention::ulysses, SpAttention::kv_gather, SpAttention::ring};
  for (const Chunks& c : {Chunks{}, Chunks{7, 13, 5, 11}})
    expect_modes_equal_one_rank(weights_with_heads(4, WeightFormat::bf16), cases, modes, true, c);
}

// The split is the same for every weight format: int8 W8A8 through all
// modes, on the plain CPU backend (its own attention finish).
TEST(RankParallel, Int8WeightsEqualOneRankBitForBit) {
  const Case cases[] = {{5, 3, 29, true, false}, {30, 16, 300, false, false}};
  const SpAttention modes[] = {SpAttention::ulysses, SpAttention::kv_gather, SpAttention::ring};
  expect_modes_equal_one_rank(weights_for(WeightFormat::int8), cases, modes, false);
}

// The ring's query chunks of 1 row, primes and a whole shard all give the
// same bits, and an attention-only call equals the stock one's.
TEST(RankParallel, RingChunksAndAttentionOnlyEqualOneRank) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  BlockHarness h(w, small_layout(w.config, 30, 16, 300, false, false));  // 362 rows, 3 tiles
  h.be = make_backend(true);
  const std::vector<uint16_t> x0 = h.random_x(3);
  const std::vector<uint16_t> stock = run_one_rank(h, x0);
  for (int ranks : {2, 3, 4})
    for (int64_t q_chunk : {1, 13, 64, 129}) {
      const SpOptions o{.attention = SpAttention::ring, .ring_q_chunk = q_chunk};
      EXPECT_TRUE(bits_equal(stock, run_ranks(h, x0, ranks, o)))
          << ranks << " ranks, ring_q_chunk " << q_chunk;
    }
  const std::vector<uint16_t> attn_only = run_one_rank(h, x0, nullptr, BlockPhases::attn_only);
  EXPECT_FALSE(bits_equal(attn_only, stock));
  for (SpAttention mode : {SpAttention::ulysses, SpAttention::kv_gather, SpAttention::ring})
    EXPECT_TRUE(
        bits_equal(attn_only, run_ranks(h, x0, 3, {.attention = mode}, BlockPhases::attn_only)))
        << mode_name(mode);
}

// Chunked projections, attention, out-projections and MLP on every rank give
// the one-rank bits: every mode at 1-4 ranks, chunks of one row, primes with
// tails, chunks larger than a rank's rows (and than the sequence), on lengths
// of fewer rows than ranks, tag runs, a prime and several key tiles, whole
// blocks and attention-only calls.
TEST(RankParallel, ChunkedRanksEqualOneRankBitForBit) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  const Case cases[] = {
      {0, 0, 3, false, false},     // 3 rows
      {5, 3, 29, true, false},     // 40 rows, tag runs
      {7, 0, 124, false, false},   // 131 rows (prime)
      {30, 16, 300, false, true},  // 363 rows with a cond frame (3 key tiles)
  };
  const Chunks chunk_sets[] = {
      {1, 1, 1, 1},          // one row
      {7, 13, 5, 11},        // primes with tails
      {37, 50, 23, 64},      // a few chunks a rank
      {1000, 999, 1001, 0},  // one chunk, larger than a rank's rows
  };
  const SpAttention modes[] = {SpAttention::ulysses, SpAttention::kv_gather, SpAttention::ring};
  for (const Case& k : cases) {
    BlockHarness h(w, small_layout(w.config, k.text, k.audio_t, k.frames, k.tags, k.cond));
    h.be = make_backend(true);
    const int64_t seq = h.layout.seq_len;
    const std::vector<uint16_t> x0 = h.random_x(uint64_t(seq) + 11);
    for (BlockPhases phases : {BlockPhases::all, BlockPhases::attn_only}) {
      const std::vector<uint16_t> stock = run_one_rank(h, x0, nullptr, phases);
      EXPECT_FALSE(bits_equal(x0, stock));  // the comparisons below can fail
      for (const Chunks& c : chunk_sets) {
        // Attention-only calls differ only in skipping the MLP: two sets do.
        // One-row chunks stop at 40 rows (RingChunksAndAttentionOnly...
        // runs the ring's one-row chunks over 3 key tiles), and the longest
        // case takes the prime and the oversized sets: the sweep stays a few
        // seconds, and minutes under the sanitizers.
        if (phases == BlockPhases::attn_only && c.q != 7 && c.q != 1000) continue;
        if (c.q == 1 && seq > 40) continue;
        if (seq > 131 && c.q != 7 && c.q != 1000) continue;
        const StreamChunks streamed = c.streamed();
        ASSERT_TRUE(bits_equal(stock, run_one_rank(h, x0, &streamed, phases))) << "seq " << seq;
        for (SpAttention mode : modes)
          for (int ranks = 2; ranks <= 4; ++ranks)  // (one rank: the tests above)
            EXPECT_TRUE(bits_equal(stock, run_ranks(h, x0, ranks, c.sp(mode), phases)))
                << fmt::format("{} at {} ranks, seq {}, chunks q {} kv {} mlp {} ring_q {}{}",
                               mode_name(mode), ranks, seq, c.q, c.kv, c.mlp, c.ring_q,
                               phases == BlockPhases::attn_only ? ", attention only" : "");
      }
    }
  }
}

// Small chunks bound a rank's activations: at the same length, each rank's
// arena peak is clearly below its peak with whole-rank chunks, in every mode
// (beside the inherent Q/K/V of Ulysses' heads, the gathered K/V and the
// ring's shard, which the chunks cannot shrink), with the same bits.
TEST(RankParallel, SmallChunksLowerEachRanksArenaPeak) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  BlockHarness h(w, small_layout(w.config, 30, 16, 530, false, false));  // 592 rows
  h.be = make_backend(true);
  const std::vector<uint16_t> x0 = h.random_x(21);
  const std::vector<uint16_t> stock = run_one_rank(h, x0);
  const Chunks whole{0, 0, 0, 0}, small{32, 32, 32, 32};
  for (SpAttention mode : {SpAttention::ulysses, SpAttention::kv_gather, SpAttention::ring})
    for (int ranks : {2, 3}) {
      std::vector<size_t> whole_peaks, small_peaks;
      EXPECT_TRUE(bits_equal(
          stock, run_ranks(h, x0, ranks, whole.sp(mode), BlockPhases::all, &whole_peaks)));
      EXPECT_TRUE(bits_equal(
          stock, run_ranks(h, x0, ranks, small.sp(mode), BlockPhases::all, &small_peaks)));
      for (int r = 0; r < ranks; ++r) {
        // At least a quarter less on every rank (measured: 0.16-0.66 of it).
        const size_t whole_peak = whole_peaks[size_t(r)], small_peak = small_peaks[size_t(r)];
        EXPECT_LT(small_peak * 4, whole_peak * 3)
            << fmt::format("{} at {} ranks, rank {}: peak {} with chunks of 32 rows, {} whole",
                           mode_name(mode), ranks, r, small_peak, whole_peak);
      }
    }
}

TEST(RankParallel, WrongRowsOnARankFailNamingIt) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  BlockHarness h(w, small_layout(w.config, 0, 0, 10, false, false));
  const std::vector<uint16_t> x = h.random_x(1);
  const BlockView b = h.view();
  std::string err;
  try {
    run_local_ranks(2, [&](Communicator& comm) {
      HostMemory memory;
      Arena arena(memory, 0);
      const std::unique_ptr<Backend> be = make_cpu_backend(1);
      // Rank 1 passes the whole sequence instead of its rows [5, 10).
      const int64_t rows = comm.rank() == 0 ? 5 : 10;
      std::vector<uint16_t> mine(x.begin(), x.begin() + rows * w.config.hidden);
      run_block_sp(*be, arena, comm, b,
                   Tensor::contiguous(mine.data(), DType::bf16, {rows, w.config.hidden}), 10, {});
    });
  } catch (const std::exception& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("rank 1 of 2 holds rows [5, 10) of 10: x has 10 rows, expected 5"),
            std::string::npos)
      << err;
}

}  // namespace
}  // namespace h3s::test
