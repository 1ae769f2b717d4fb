// Weight residency under a device budget, on the CPU backend (which plans with
// a device's copy sizes and copies streamed weights into its own stores): every
// decision (resident, streamed with prefetch, streamed without, refused) gives
// the unbudgeted stock forward's bits, keeps arena + weight stores inside the
// budget, and a budget too small is refused before any work with the numbers.
// The activation estimate the split rests on never falls short of the
// measured arena peak.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "exec/forward.hpp"
#include "exec/placement.hpp"
#include "exec/weight_feed.hpp"
#include "exec_fixture.hpp"
#include "model/checkpoint.hpp"

namespace h3s::test {
namespace {

// The CPU backend keeps its scratch off the arena.
constexpr ScratchModel kCpuScratch{.quant_rows = false, .mod_index = false};

ExecOptions chunked() {
  return streamed_options(37, 41, 43, 128, 19);
}

ForwardOutputs forward(const ModelWeights& w, const PackedLayout& l, const ExecOptions& o) {
  HostMemory mem;
  Arena arena(mem, 0);
  auto be = make_cpu_backend(2);
  return run_forward(*be, arena, w, l, random_inputs(w.config, l, 77), o);
}

bool same_outputs(const ForwardOutputs& a, const ForwardOutputs& b) {
  return a.video.size() == b.video.size() && a.audio.size() == b.audio.size() &&
         std::memcmp(a.video.data(), b.video.data(), a.video.size() * 4) == 0 &&
         std::memcmp(a.audio.data(), b.audio.data(), a.audio.size() * 4) == 0;
}

struct Budgets {
  size_t estimate, resident, prefetch, one_block;
};

Budgets budgets_for(const ModelWeights& w, const PackedLayout& l, const ExecOptions& o) {
  auto be = make_cpu_backend(1);
  const WeightPlan all = plan_weights(*be, w, 0);
  const size_t est = estimate_activation_peak(w.config, l, o, kCpuScratch);
  return {est, est + all.model_bytes, est + all.extras_bytes + 2 * all.block_bytes,
          est + all.extras_bytes + all.block_bytes};
}

class WeightResidency : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(WeightResidency, EveryPlanGivesTheStockBitsInsideTheBudget) {
  const ModelWeights& w = weights_for(GetParam());
  const PackedLayout l = small_layout(w.config, 23, 9, 131, true, true);  // 173 tokens
  const ForwardOutputs stock = forward(w, l, ExecOptions::stock());
  const Budgets b = budgets_for(w, l, chunked());
  const struct {
    size_t budget;
    Residency residency;
    int prefetch;
  } plans[] = {{0, Residency::resident, 0},
               {b.resident, Residency::resident, 0},
               {b.prefetch, Residency::streamed, 1},
               {b.prefetch - 1, Residency::streamed, 0},
               {b.one_block, Residency::streamed, 0}};
  for (const auto& p : plans) {
    SCOPED_TRACE(::testing::Message() << "vram_budget " << p.budget);
    ExecOptions o = chunked();
    o.vram_budget = p.budget;
    const ForwardOutputs s = forward(w, l, o);
    EXPECT_EQ(s.weights.residency, p.residency);
    EXPECT_EQ(s.weights.prefetch, p.prefetch);
    EXPECT_TRUE(same_outputs(stock, s));
    EXPECT_EQ(s.streamed_blocks, w.config.blocks);
    if (p.budget != 0) {
      // The arena got what the weights left, and both stayed inside.
      EXPECT_LE(s.peak_bytes + s.weights_peak_bytes, p.budget);
      EXPECT_LE(s.weights_peak_bytes, s.weights.held_bytes);
    }
    if (p.residency == Residency::streamed) {
      // Streamed weights really are copies in the slot stores.
      EXPECT_GE(s.weights_peak_bytes, s.weights.block_bytes);
    }
  }
}

// Budgets below the smallest placement are refused before any work:
// tests/exec/test_placement.cpp (Placements.ImpossibleBudgetsAreRefusedBeforeAnyWork).

INSTANTIATE_TEST_SUITE_P(Formats, WeightResidency,
                         ::testing::Values(WeightFormat::bf16, WeightFormat::int8,
                                           WeightFormat::w4a8, WeightFormat::nvfp4),
                         [](const auto& p) { return std::string(format_name(p.param)); });

// Streamed from a mapped file: the loaded weights are views of the file (no
// copy of the model in memory), and a streamed forward over them equals the
// in-memory model's stock forward.
TEST(WeightResidencyFile, StreamedFromTheMappedFileEqualsInMemoryStock) {
  for (const WeightFormat f : {WeightFormat::int8, WeightFormat::w4a8, WeightFormat::nvfp4}) {
    SCOPED_TRACE(format_name(f));
    const ModelWeights& w = weights_for(f);
    const std::string path =
        (std::filesystem::path(::testing::TempDir()) /
         (std::string("h3s_residency_") + std::string(format_name(f)) + ".safetensors"))
            .string();
    write_checkpoint(w, path);
    CheckpointSummary summary;
    const ModelWeights mapped = load_checkpoint(path, &summary);
    // Every weight array is viewed in place; only converted scales/biases copy,
    // and the fp32 islands, rounded to bf16 as ComfyUI holds them.
    size_t island_bytes = 0;
    for (const CheckpointSummary::Layer& l : summary.linears)
      if (l.held_bf16) island_bytes += l.bytes;
    ASSERT_GT(island_bytes, 0u);
    ASSERT_GE(summary.copied_bytes, island_bytes);
    EXPECT_GT(summary.viewed_bytes, 10 * (summary.copied_bytes - island_bytes));
    const QuantLinear& qkv = mapped.blocks[0].attn.qkv;
    EXPECT_NE(f == WeightFormat::nvfp4 ? qkv.fp4_codes.owner() : qkv.w_scale.owner(), nullptr);
    const PackedLayout l = small_layout(w.config, 12, 5, 60, false, true);
    const ForwardOutputs stock = forward(w, l, ExecOptions::stock());
    ExecOptions o = chunked();
    o.vram_budget = budgets_for(mapped, l, o).prefetch;
    const ForwardOutputs s = forward(mapped, l, o);
    EXPECT_EQ(s.weights.residency, Residency::streamed);
    EXPECT_EQ(s.weights.prefetch, 1);
    EXPECT_TRUE(same_outputs(stock, s));
    std::filesystem::remove(path);
  }
}

// The estimate is an upper bound of the arena peak, and not a wild one.
TEST(ActivationEstimate, BoundsTheMeasuredPeak) {
  const ModelWeights& w = weights_for(WeightFormat::int8);
  ExecOptions no_trim = chunked();
  no_trim.trim_forward = false;
  ExecOptions check = chunked();
  check.self_check = true;
  ExecOptions whole = chunked();
  whole.mlp_chunk = 0;
  whole.final_layer_chunk = 0;
  ExecOptions merged = chunked();
  merged.merge_tail_below = 16;
  for (const PackedLayout& l : {small_layout(w.config, 23, 9, 131, true, true),
                                small_layout(w.config, 64, 20, 700, false, false),
                                small_layout(w.config, 0, 1, 1, false, false)})
    for (const ExecOptions& o : {ExecOptions::stock(), chunked(), no_trim, check, whole, merged}) {
      SCOPED_TRACE(::testing::Message() << l.seq_len << " tokens, q " << o.q_chunk << " trim "
                                        << o.trim_forward << " self_check " << o.self_check);
      const size_t est = estimate_activation_peak(w.config, l, o, kCpuScratch);
      const size_t peak = forward(w, l, o).peak_bytes;
      EXPECT_GE(est, peak);
      EXPECT_LE(est, 2 * peak + (size_t(1) << 16));
    }
}

}  // namespace
}  // namespace h3s::test
