// The placement planner (exec/placement.hpp) on the CPU backend, whose
// staging memory is a second budgeted pool, so every decision runs in CI:
// each placement gives the stock forward's bits; the automatic choice stages
// the K/V when (and only when) the resident store does not fit; the measured
// arena peaks stay under the predicted ones, per phase; a budget below the
// smallest placement, or a host budget below the staged store, is refused
// before any work with the numbers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "exec/forward.hpp"
#include "exec/placement.hpp"
#include "exec/weight_feed.hpp"
#include "exec_fixture.hpp"

namespace h3s::test {
namespace {

struct Outcome {
  ForwardOutputs out;
  std::vector<std::string> stages;
};

Outcome forward(const ModelWeights& w, const PackedLayout& l, const ExecOptions& o) {
  HostMemory mem;
  Arena arena(mem, 0);
  auto be = make_cpu_backend(2);
  Outcome r;
  r.out = run_forward(*be, arena, w, l, random_inputs(w.config, l, 77), o,
                      [&](const std::string& s) { r.stages.push_back(s); });
  return r;
}

bool same_outputs(const ForwardOutputs& a, const ForwardOutputs& b) {
  return a.video.size() == b.video.size() && a.audio.size() == b.audio.size() &&
         std::memcmp(a.video.data(), b.video.data(), a.video.size() * 4) == 0 &&
         std::memcmp(a.audio.data(), b.audio.data(), a.audio.size() * 4) == 0;
}

// Highest measured arena bytes over the ledger entries of `phase` (the
// embed phase's prediction covers the refiner's entries too).
size_t measured(const ForwardOutputs& o, Phase phase) {
  size_t m = 0;
  for (const LedgerEntry& e : o.ledger)
    if (e.phase == phase || (phase == Phase::embed && e.phase == Phase::refiner))
      m = std::max(m, e.peak);
  return m;
}

// 1,031 tokens: the K/V store (8 KiB a row) outweighs four 128-key tiles.
PackedLayout long_layout(const ModelConfig& c) {
  return small_layout(c, 41, 37, 238, true, true);
}

constexpr ScratchModel kCpuScratch{.quant_rows = false, .mod_index = false};

class Placements : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(Placements, HostStagedForwardEqualsStockAndMovesWhatItPredicts) {
  const ModelWeights& w = weights_for(GetParam());
  const PackedLayout l = long_layout(w.config);
  const Outcome stock = forward(w, l, ExecOptions::stock());
  // K/V chunks of 97 rows start off the attention tiles (phase 1 cannot
  // attend the first query group); of 256 they start on them, so it does.
  for (const auto& [kv_chunk, kv_block] :
       {std::pair<int64_t, int64_t>{97, 0}, {97, 128}, {97, 384}, {256, 0}, {256, 384}}) {
    SCOPED_TRACE(::testing::Message() << "kv_chunk " << kv_chunk << " kv_block " << kv_block);
    ExecOptions o = streamed_options(211, kv_chunk, 301, kv_block, 89, FinalLayerGemm::streamed);
    o.kv_placement = KvPlacement::host;
    const Outcome staged = forward(w, l, o);
    const Placement& p = staged.out.placement;
    SCOPED_TRACE(p.describe());
    EXPECT_TRUE(p.kv_on_host);
    // Off the tiles it cannot; on them the planner takes it where it fits
    // (with its own tile it does here).
    if (kv_chunk % kAttnKvTile != 0) {
      EXPECT_FALSE(p.kv_first_pass);
    } else if (kv_block == 0) {
      EXPECT_TRUE(p.kv_first_pass);
    }
    if (kv_block != 0) {
      EXPECT_EQ(p.kv_block, kv_block);  // the user's tile, whatever it costs
    } else {
      // The planner's: unbudgeted, staging holds no more than the resident store would.
      const ExecOptions resident =
          streamed_options(211, kv_chunk, 301, 0, 89, FinalLayerGemm::streamed);
      EXPECT_LE(p.device_peak,
                plan_placement(w.config, l, resident, 0, 0, kCpuScratch).device_peak);
    }
    EXPECT_TRUE(same_outputs(stock.out, staged.out));
    EXPECT_EQ(staged.out.streamed_blocks, w.config.blocks);
    const uint64_t blocks = uint64_t(w.config.blocks);
    EXPECT_EQ(staged.out.staging.to_host_bytes, blocks * p.kv_to_host_per_block);
    EXPECT_EQ(staged.out.staging.to_device_bytes, blocks * p.kv_to_device_per_block);
    EXPECT_EQ(p.kv_to_host_per_block, uint64_t(l.seq_len) * uint64_t(w.config.inner()) * 4);
  }
}

TEST_P(Placements, AutoStagesTheKvOnlyWhenTheResidentStoreDoesNotFit) {
  const ModelWeights& w = weights_for(GetParam());
  const PackedLayout l = long_layout(w.config);
  const Outcome stock = forward(w, l, ExecOptions::stock());
  auto be = make_cpu_backend(1);
  const WeightPlan all = plan_weights(*be, w, 0);
  const ExecOptions o = streamed_options(211, 97, 301, 0, 89);
  const ScratchModel cpu = kCpuScratch;
  const Placement resident = plan_placement(w.config, l, o, 0, 0, cpu);
  ASSERT_FALSE(resident.kv_on_host);
  const Placement smallest = smallest_placement(w.config, l, o, cpu);
  ASSERT_LT(smallest.device_peak, resident.device_peak);

  struct Case {
    size_t budget;
    bool staged;
  } cases[] = {{0, false},
               {all.model_bytes + resident.device_peak, false},
               // the weights stream rather than the K/V leaving the device
               {all.extras_bytes + all.block_bytes + resident.device_peak, false},
               {all.extras_bytes + all.block_bytes + resident.device_peak - 1, true},
               {all.extras_bytes + all.block_bytes + smallest.device_peak, true}};
  for (const Case& k : cases) {
    SCOPED_TRACE(::testing::Message() << "vram_budget " << k.budget);
    ExecOptions b = o;
    b.vram_budget = k.budget;
    const Outcome r = forward(w, l, b);
    EXPECT_EQ(r.out.placement.kv_on_host, k.staged) << r.out.placement.describe();
    EXPECT_TRUE(same_outputs(stock.out, r.out));
    if (k.budget != 0) {
      EXPECT_LE(r.out.peak_bytes + r.out.weights_peak_bytes, k.budget);
    }
    EXPECT_EQ(r.out.staging.to_host_bytes != 0, k.staged);
    // The placement is announced before the first block.
    const auto placed = std::find_if(r.stages.begin(), r.stages.end(), [](const std::string& s) {
      return s.rfind("placement: ", 0) == 0;
    });
    const auto block = std::find(r.stages.begin(), r.stages.end(), "block 1/2");
    EXPECT_TRUE(placed < block) << "no placement line before block 1";
  }
}

// Measured per-phase arena peaks never exceed the prediction and come
// within 3% of it (with the CPU's scratch model; the CUDA backend's arena
// scratch is checked on the device).
TEST_P(Placements, PredictedPeaksBoundTheMeasuredOnes) {
  const ModelWeights& w = weights_for(GetParam());
  const PackedLayout l = long_layout(w.config);
  ExecOptions staged = streamed_options(211, 97, 301, 256, 89, FinalLayerGemm::streamed);
  staged.kv_placement = KvPlacement::host;
  // K/V chunks on attention tiles, the planner's tile: phase 1 holds the
  // first query group too (and a last K/V chunk shorter than the others).
  ExecOptions first_in_phase1 = staged;
  first_in_phase1.kv_chunk = 256;
  first_in_phase1.kv_block = 0;
  ExecOptions short_tail = staged;
  short_tail.kv_chunk = 256;
  const ExecOptions resident = streamed_options(211, 97, 301, 0, 89);
  const ExecOptions cases[] = {staged, first_in_phase1, short_tail, resident, ExecOptions::stock()};
  for (const ExecOptions& o : cases) {
    const Outcome r = forward(w, l, o);
    const Placement& p = r.out.placement;
    SCOPED_TRACE(p.describe());
    EXPECT_EQ(p.kv_first_pass, &o == &cases[1]);
    const struct {
      Phase phase;
      size_t predicted;
    } phases[] = {{Phase::embed, p.embed_peak},
                  {Phase::kv, p.kv_peak},
                  {Phase::attn, p.attn_peak},
                  {Phase::mlp, p.mlp_peak},
                  {Phase::final, p.final_peak}};
    for (const auto& ph : phases) {
      const size_t m = measured(r.out, ph.phase);
      EXPECT_LE(m, ph.predicted) << phase_name(ph.phase);
      EXPECT_GE(double(m), 0.97 * double(ph.predicted)) << phase_name(ph.phase);
    }
    // The whole forward: the highest phase plus the planner's 64 KiB for
    // small tables, never less.
    EXPECT_LE(r.out.peak_bytes, p.device_peak);
    EXPECT_GE(r.out.peak_bytes + (size_t(64) << 10), p.device_peak);
  }
}

// Under a budget the staged K/V alone cannot meet, the residual x goes to
// host memory too, chunk by chunk: the same bits, the traffic the plan
// predicts (x written once by the embeds, read by the final layer, and per
// block in four times and out twice), the peaks under the prediction.
TEST_P(Placements, ResidualStagedOnlyWhenStagedKvIsNotEnough) {
  const ModelWeights& w = weights_for(GetParam());
  const PackedLayout l = long_layout(w.config);
  const Outcome stock = forward(w, l, ExecOptions::stock());
  auto be = make_cpu_backend(1);
  const WeightPlan all = plan_weights(*be, w, 0);
  // Chunks short against the sequence: a staged x holds two chunk slots.
  const ExecOptions o = streamed_options(97, 97, 97, 0, 89);
  const Placement smallest = smallest_placement(w.config, l, o, kCpuScratch);
  ASSERT_TRUE(smallest.x_on_host);
  Placement kv_only = smallest;
  kv_only.x_on_host = false;
  kv_only = predict(w.config, l, o, kv_only, kCpuScratch);
  ASSERT_LT(smallest.device_peak, kv_only.device_peak) << smallest.describe() << "\n"
                                                       << kv_only.describe();
  const size_t weights = all.extras_bytes + all.block_bytes;

  ExecOptions b = o;
  b.vram_budget = weights + kv_only.device_peak;
  const Outcome kv = forward(w, l, b);
  EXPECT_TRUE(kv.out.placement.kv_on_host);
  EXPECT_FALSE(kv.out.placement.x_on_host) << kv.out.placement.describe();
  EXPECT_TRUE(same_outputs(stock.out, kv.out));

  b.vram_budget = weights + smallest.device_peak;
  const Outcome r = forward(w, l, b);
  const Placement& p = r.out.placement;
  SCOPED_TRACE(p.describe());
  EXPECT_TRUE(p.kv_on_host && p.x_on_host);
  EXPECT_TRUE(same_outputs(stock.out, r.out));
  EXPECT_LE(r.out.peak_bytes + r.out.weights_peak_bytes, b.vram_budget);
  const uint64_t blocks = uint64_t(w.config.blocks), row = uint64_t(w.config.hidden) * 2;
  const uint64_t x_bytes = uint64_t(l.seq_len) * row;
  EXPECT_EQ(p.host_bytes, p.kv_to_host_per_block + x_bytes);
  EXPECT_EQ(r.out.staging.to_host_bytes,
            blocks * (p.kv_to_host_per_block + p.x_to_host_per_block) + x_bytes);
  EXPECT_EQ(r.out.staging.to_device_bytes,
            blocks * (p.kv_to_device_per_block + p.x_to_device_per_block) +
                uint64_t(l.video.size() + l.audio.size()) * row);
  for (const auto& [phase, predicted] :
       {std::pair{Phase::embed, p.embed_peak}, std::pair{Phase::kv, p.kv_peak},
        std::pair{Phase::attn, p.attn_peak}, std::pair{Phase::mlp, p.mlp_peak},
        std::pair{Phase::final, p.final_peak}}) {
    EXPECT_LE(measured(r.out, phase), predicted) << phase_name(phase);
    EXPECT_GE(double(measured(r.out, phase)), 0.97 * double(predicted)) << phase_name(phase);
  }
}

TEST_P(Placements, ImpossibleBudgetsAreRefusedBeforeAnyWork) {
  const ModelWeights& w = weights_for(GetParam());
  const PackedLayout l = long_layout(w.config);
  auto be = make_cpu_backend(1);
  const WeightPlan all = plan_weights(*be, w, 0);
  const ExecOptions o = streamed_options(211, 97, 301, 0, 89);
  const ScratchModel cpu = kCpuScratch;
  const size_t need =
      all.extras_bytes + all.block_bytes + smallest_placement(w.config, l, o, cpu).device_peak;
  for (const size_t budget : {need - 1, need / 2, all.extras_bytes + all.block_bytes}) {
    ExecOptions b = o;
    b.vram_budget = budget;
    std::vector<std::string> stages;
    try {
      HostMemory mem;
      Arena arena(mem, 0);
      run_forward(*be, arena, w, l, random_inputs(w.config, l, 77), b,
                  [&](const std::string& s) { stages.push_back(s); });
      FAIL() << "vram_budget " << budget << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
      const std::string m = e.what();
      EXPECT_NE(m.find("at least " + format_bytes(need)), std::string::npos) << m;
      EXPECT_NE(m.find("--vram-budget"), std::string::npos) << m;
      EXPECT_TRUE(stages.empty()) << "work started: " << stages.front();
    }
  }
  // The staged store needs host memory too: a host budget below it is refused.
  ExecOptions h = o;
  h.kv_placement = KvPlacement::host;
  h.host_budget = uint64_t(l.seq_len) * uint64_t(w.config.inner()) * 4 - 1;
  try {
    forward(w, l, h);
    FAIL() << "host_budget " << h.host_budget << " accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("--host-budget"), std::string::npos) << e.what();
  }
  // Host staging needs the streamed path.
  ExecOptions s = ExecOptions::stock();
  s.kv_placement = KvPlacement::host;
  try {
    forward(w, l, s);
    FAIL() << "kv_placement host accepted on the stock path";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("kv_placement = host"), std::string::npos) << e.what();
  }
}

// A K/V tier's scratch in the plan: the decode blocks a backend takes for a
// tier it attends with the exact kernel (CUDA's kvfp4s off Hopper) add
// exactly their K and V rows to the attention phase, streamed and stock,
// capped at the sequence; a tier the backend lacks counts the exact store
// it runs instead. The CPU backend runs every tier and decodes nothing.
TEST(PlacementTiers, DecodeBlocksAndTheExactFallbackAreCounted) {
  const ModelWeights& w = weights_for(WeightFormat::int8);
  const PackedLayout l = long_layout(w.config);
  const size_t S = size_t(l.seq_len), row = size_t(2 * w.config.inner() * 2);
  auto be = make_cpu_backend(1);
  for (const KvTier tier :
       {KvTier::bf16, KvTier::kvi8r, KvTier::kvi8s, KvTier::kvfp4s, KvTier::kvmix}) {
    const ScratchModel cpu = scratch_model(*be, w, tier);
    EXPECT_TRUE(cpu.kv_tier_runs) << kv_tier_name(tier);
    EXPECT_EQ(cpu.kv_decode_keys, 0) << kv_tier_name(tier);
  }
  for (const ExecOptions& base : {streamed_options(211, 97, 301, 0, 89), ExecOptions::stock()}) {
    SCOPED_TRACE(base.mode == ExecMode::stock ? "stock" : "streamed");
    ExecOptions o = base;
    o.kv_store = KvTier::kvfp4s;
    const Placement plain = plan_placement(w.config, l, o, 0, 0, kCpuScratch);
    for (const int64_t keys : {int64_t(512), int64_t(4096)}) {
      ScratchModel decoding = kCpuScratch;
      decoding.kv_decode_keys = keys;
      const Placement p = plan_placement(w.config, l, o, 0, 0, decoding);
      EXPECT_EQ(p.attn_peak - plain.attn_peak, std::min(S, size_t(keys)) * row) << keys;
      EXPECT_EQ(p.kv_peak, plain.kv_peak);
    }
    // The exact store's bytes for a tier the backend lacks: the exact plan.
    ExecOptions exact = base;
    exact.kv_store = KvTier::bf16;
    ScratchModel lacking = kCpuScratch;
    lacking.kv_tier_runs = false;
    const Placement fallback = plan_placement(w.config, l, o, 0, 0, lacking);
    const Placement want = plan_placement(w.config, l, exact, 0, 0, kCpuScratch);
    EXPECT_EQ(fallback.kv_peak, want.kv_peak);
    EXPECT_EQ(fallback.attn_peak, want.attn_peak);
    EXPECT_NE(fallback.attn_peak, plain.attn_peak) << "the tier's own plan";
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, Placements,
                         ::testing::Values(WeightFormat::bf16, WeightFormat::int8,
                                           WeightFormat::w4a8, WeightFormat::nvfp4),
                         [](const auto& p) { return std::string(format_name(p.param)); });

}  // namespace
}  // namespace h3s::test
