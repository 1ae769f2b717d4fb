// Placement on the CUDA backend: the host-staged K/V store (pinned memory, a
// copy stream ordered by events) gives the stock bits for every format and
// odd lengths, moves the bytes the plan says, and the measured arena peaks
// (CUDA scratch included) stay under the planner's per-phase predictions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string_view>

#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/kernels.hpp"
#include "exec/forward.hpp"
#include "exec/placement.hpp"
#include "exec/weight_feed.hpp"
#include "exec_fixture.hpp"
#include "gpu_fixture.hpp"

namespace h3s::test {
namespace {

size_t measured(const ForwardOutputs& o, Phase phase) {
  size_t m = 0;
  for (const LedgerEntry& e : o.ledger)
    if (e.phase == phase) m = std::max(m, e.peak);
  return m;
}

TEST(GpuPlacement, HostStagedKvEqualsStockAndStaysUnderThePrediction) {
  H3S_REQUIRE_GPU();
  for (WeightFormat f :
       {WeightFormat::int8, WeightFormat::bf16, WeightFormat::w4a8, WeightFormat::nvfp4}) {
    SCOPED_TRACE(format_name(f));
    const ModelWeights& w = weights_for(f);
    const PackedLayout l = small_layout(w.config, 41, 37, 551, true, true);  // odd length
    const ForwardInputs in = random_inputs(w.config, l, 3);
    auto run = [&](const ExecOptions& o) {
      cuda::CudaMemory mem;
      Arena arena(mem, 0);
      auto be = make_gpu_backend(arena);
      return run_forward(*be, arena, w, l, in, o);
    };
    const ForwardOutputs stock = run(ExecOptions::stock());
    // K/V chunks of 100 rows start off the attention tiles; of 256 on them,
    // where phase 1 attends the first query group (kv_first_pass).
    for (const auto& [kv_chunk, kv_block] :
         {std::pair<int64_t, int64_t>{100, 0}, {100, 256}, {256, 0}}) {
      SCOPED_TRACE(::testing::Message() << "kv_chunk " << kv_chunk << " kv_block " << kv_block);
      ExecOptions o = streamed_options(97, kv_chunk, 77, kv_block, 50, FinalLayerGemm::streamed);
      o.kv_placement = KvPlacement::host;
      const ForwardOutputs s = run(o);
      const Placement& p = s.placement;
      SCOPED_TRACE(p.describe());
      ASSERT_TRUE(p.kv_on_host);
      EXPECT_EQ(p.kv_first_pass, kv_chunk == 256);
      ASSERT_EQ(s.video.size(), stock.video.size());
      EXPECT_EQ(std::memcmp(s.video.data(), stock.video.data(), s.video.size() * 4), 0);
      EXPECT_EQ(std::memcmp(s.audio.data(), stock.audio.data(), s.audio.size() * 4), 0);
      const uint64_t blocks = uint64_t(w.config.blocks);
      EXPECT_EQ(s.staging.to_host_bytes, blocks * p.kv_to_host_per_block);
      EXPECT_EQ(s.staging.to_device_bytes, blocks * p.kv_to_device_per_block);
      EXPECT_GT(s.staging.copy_seconds, 0.0);
      for (const auto& [phase, predicted] :
           {std::pair{Phase::kv, p.kv_peak}, std::pair{Phase::attn, p.attn_peak},
            std::pair{Phase::mlp, p.mlp_peak}, std::pair{Phase::final, p.final_peak}})
        EXPECT_LE(measured(s, phase), predicted) << phase_name(phase);
      EXPECT_LE(s.peak_bytes, p.device_peak);
    }
  }
}

// A streamed forward with each K/V tier stays under the planner's per-phase
// predictions: the tier's store (or, for a tier this GPU has no kernels for,
// the exact store it runs instead) and the decode blocks of kvfp4s and
// kvi8r where they decode (kvfp4s on every GPU, kvi8r off Hopper), counted
// in the attention phase.
TEST(GpuPlacement, KvTierForwardsStayUnderThePrediction) {
  H3S_REQUIRE_GPU();
  const ModelWeights& w = weights_for(WeightFormat::int8);
  const PackedLayout l = small_layout(w.config, 41, 37, 551, true, true);
  const ForwardInputs in = random_inputs(w.config, l, 3);
  for (const char* tier : {"kvfp4s", "kvi8r", "kvi8s", "kvmix"}) {
    SCOPED_TRACE(tier);
    cuda::CudaMemory mem;
    Arena arena(mem, 0);
    auto be = make_gpu_backend(arena);
    ExecOptions o = streamed_options(97, 100, 77, 0, 50);
    o.kv_store = parse_kv_tier(tier);
    const ScratchModel scratch = scratch_model(*be, w, o.kv_store);
    EXPECT_EQ(scratch.kv_tier_runs, be->has_kv_tier(o.kv_store));
    const std::string_view t = tier;
    // kvfp4s (and kvmix's 4-bit heads) decode unless its Hopper kernel runs
    // (sm90), 16384 keys at a time on Hopper, 4096 elsewhere and on the sm80
    // route; kvi8r decodes 4096 off Hopper and on that route.
    const bool hopper = cuda::arch::hopper_kernels() && attn_kernel() != AttnKernel::sm80;
    int64_t keys = 0;
    if ((t == "kvfp4s" || t == "kvmix") && attn_kernel() != AttnKernel::sm90)
      keys = hopper ? 16384 : 4096;
    if (t == "kvi8r" && !hopper) keys = 4096;
    EXPECT_EQ(scratch.kv_decode_keys, be->has_kv_tier(o.kv_store) ? keys : 0);
    const ForwardOutputs s = run_forward(*be, arena, w, l, in, o);
    const Placement& p = s.placement;
    SCOPED_TRACE(p.describe());
    for (const auto& [phase, predicted] :
         {std::pair{Phase::kv, p.kv_peak}, std::pair{Phase::attn, p.attn_peak},
          std::pair{Phase::mlp, p.mlp_peak}, std::pair{Phase::final, p.final_peak}})
      EXPECT_LE(measured(s, phase), predicted) << phase_name(phase);
    EXPECT_LE(s.peak_bytes, p.device_peak);
  }
}

// At the smallest budget the residual x is host-staged too (chunks leased
// through the copy stream): the stock bits, inside the budget, under the
// predicted peaks (CUDA's arena scratch included).
TEST(GpuPlacement, ResidualStagedAtTheSmallestBudgetEqualsStock) {
  H3S_REQUIRE_GPU();
  for (WeightFormat f : {WeightFormat::int8, WeightFormat::bf16}) {
    SCOPED_TRACE(format_name(f));
    const ModelWeights& w = weights_for(f);
    const PackedLayout l = small_layout(w.config, 41, 37, 551, true, true);
    const ForwardInputs in = random_inputs(w.config, l, 3);
    cuda::CudaMemory mem;
    Arena arena(mem, 0);
    auto be = make_gpu_backend(arena);
    const ForwardOutputs stock = run_forward(*be, arena, w, l, in, ExecOptions::stock());
    ExecOptions o = streamed_options(97, 100, 77, 0, 50);
    const WeightPlan all = plan_weights(*be, w, 0);
    const Placement smallest =
        smallest_placement(w.config, l, o, scratch_model(*be, w, o.kv_store));
    o.vram_budget = all.extras_bytes + all.block_bytes + smallest.device_peak;
    const ForwardOutputs s = run_forward(*be, arena, w, l, in, o);
    const Placement& p = s.placement;
    SCOPED_TRACE(p.describe());
    EXPECT_TRUE(p.kv_on_host && p.x_on_host);
    ASSERT_EQ(s.video.size(), stock.video.size());
    EXPECT_EQ(std::memcmp(s.video.data(), stock.video.data(), s.video.size() * 4), 0);
    EXPECT_EQ(std::memcmp(s.audio.data(), stock.audio.data(), s.audio.size() * 4), 0);
    EXPECT_LE(s.peak_bytes + s.weights_peak_bytes, o.vram_budget);
    for (const auto& [phase, predicted] :
         {std::pair{Phase::kv, p.kv_peak}, std::pair{Phase::attn, p.attn_peak},
          std::pair{Phase::mlp, p.mlp_peak}, std::pair{Phase::final, p.final_peak}})
      EXPECT_LE(measured(s, phase), predicted) << phase_name(phase);
  }
}

}  // namespace
}  // namespace h3s::test
