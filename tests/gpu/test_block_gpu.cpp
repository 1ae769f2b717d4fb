// On the GPU: streamed == stock bit for bit for every weight format and chunk
// sizes including 1, 64, 259 and short tails; kv_block on/off equal; the GPU
// block against the CPU reference within a measured bf16 tolerance; and the
// full forward stock vs streamed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/kernels.hpp"
#include "deviation.hpp"
#include "exec/forward.hpp"
#include "exec/latent_forward.hpp"
#include "exec/placement.hpp"
#include "exec_fixture.hpp"
#include "gpu_fixture.hpp"
#include "model/checkpoint.hpp"

namespace h3s::test {
namespace {

// Prime chunk sizes, 128-key K/V blocks, and kv/mlp tails under 7 rows merged.
const StreamChunks kPrimeChunks = [] {
  StreamChunks c;
  c.q_chunk = 97;
  c.kv_chunk = 131;
  c.mlp_chunk = 61;
  c.kv_block = 128;
  c.merge_tail_below = 7;
  return c;
}();

// A block on the GPU: everything lives in one device arena.
struct GpuBlock {
  cuda::CudaMemory memory;
  Arena arena{memory, 0};
  std::unique_ptr<Backend> be = make_gpu_backend(arena);
  const ModelWeights* w;
  PackedLayout layout;
  std::unique_ptr<WeightStore> store = be->make_weight_store("block 0", 0);
  ModelWeights extras;  // the time embedder, prepared
  BlockWeights block;   // block 0, prepared
  OwnedTensor adaln_in, mods, rope, x;
  BlockContext ctx;

  GpuBlock(const ModelWeights& weights, PackedLayout l) : w(&weights), layout(std::move(l)) {
    const ModelConfig& c = w->config;
    extras.config = c;
    extras.adaln_t_table = w->adaln_t_table;
    if (w->time_in.out > 0) {
      extras.time_in = be->prepare(w->time_in, Residency::resident, *store);
      extras.time_out = be->prepare(w->time_out, Residency::resident, *store);
    }
    block = prepare_block(*be, w->blocks[0], Residency::resident, *store);
    store->seal();
    be->wait_ready(*store);
    adaln_in = adaln_input(*be, arena, extras, layout.timesteps);
    mods = adaln_project(*be, arena, block.adaln, adaln_in.view, "mods");
    rope = arena.tensor(DType::bf16, {layout.seq_len, c.rope_dim / 2, 2}, "rope");
    be->upload(rope_table(layout, w->rope_inv_freq, c.rope_dim).data(), rope.view);
    x = arena.tensor(DType::bf16, {layout.seq_len, c.hidden}, "x");
    ctx.config = &c;
    ctx.layout = &layout;
    ctx.rope = rope.view;
    ctx.mods = split_block_mods(mods.view, c.hidden);
  }
  std::vector<uint16_t> run(const std::vector<uint16_t>& x0, const StreamChunks* c,
                            const std::string& kv_store = "bf16") {
    be->upload(x0.data(), x.view);
    const BlockView v = BlockView::dit(block, ctx);
    const std::vector<int> mix_heads = {1};  // kvmix: the second of the test model's two heads
    if (c) {
      StreamChunks tiered = *c;
      tiered.kv_store = parse_kv_tier(kv_store);
      tiered.kv_mix_heads = mix_heads;
      run_block_streamed(*be, arena, v, x.view, tiered);
    } else {
      run_block_stock(*be, arena, v, x.view, BlockPhases::all,
                      BlockKv{parse_kv_tier(kv_store), {}, mix_heads});
    }
    std::vector<uint16_t> out(x0.size());
    be->download(x.view, out.data());
    return out;
  }
};

std::vector<uint16_t> random_x(int64_t n, uint64_t seed) {
  Rng r(seed);
  std::vector<uint16_t> x(static_cast<size_t>(n));
  for (auto& v : x) v = f32_to_bf16(r.normal()).bits;
  return x;
}

class GpuBlockExact : public ::testing::TestWithParam<WeightFormat> {
 protected:
  void SetUp() override { H3S_REQUIRE_GPU(); }
};

TEST_P(GpuBlockExact, StreamedEqualsStockBitForBit) {
  const ModelWeights& w = weights_for(GetParam());
  for (const auto& [text, audio, frames] :
       {std::tuple<int64_t, int64_t, int64_t>{0, 0, 1}, {17, 11, 103}, {64, 20, 700}}) {
    GpuBlock g(w, small_layout(w.config, text, audio, frames, true, true));
    const int64_t seq = g.layout.seq_len;
    const std::vector<uint16_t> x0 = random_x(seq * w.config.hidden, uint64_t(seq));
    const std::vector<uint16_t> stock = g.run(x0, nullptr);
    for (const StreamChunks& c :
         {StreamChunks{.q_chunk = 1, .kv_chunk = 1, .mlp_chunk = 1},
          StreamChunks{.q_chunk = 64, .kv_chunk = 64, .mlp_chunk = 64, .kv_block = 128},
          StreamChunks{.q_chunk = 259, .kv_chunk = 259, .mlp_chunk = 259, .kv_block = 384},
          kPrimeChunks, StreamChunks{.q_chunk = seq, .kv_chunk = seq, .mlp_chunk = seq}}) {
      EXPECT_TRUE(bits_equal(stock, g.run(x0, &c)))
          << fmt::format("seq {} q {} kv {} mlp {} kv_block {}", seq, c.q_chunk, c.kv_chunk,
                         c.mlp_chunk, c.kv_block);
    }
    EXPECT_FALSE(bits_equal(x0, stock));
  }
}

// The approximate tiers on the GPU (kvi8r, kvi8s, kvfp4s, kvmix): the streamed
// block equals the tier's stock block bit for bit over the chunkings above
// (kvfp4s' 256-token stat blocks left open by every chunking but the last),
// and differs from the exact store's block (the tier really ran).
TEST_P(GpuBlockExact, ApproximateTiersStreamedEqualTheirStockBitForBit) {
  const ModelWeights& w = weights_for(GetParam());
  GpuBlock g(w, small_layout(w.config, 17, 11, 400, true, true));
  const int64_t seq = g.layout.seq_len;
  const std::vector<uint16_t> x0 = random_x(seq * w.config.hidden, uint64_t(seq) + 1);
  const std::vector<uint16_t> exact = g.run(x0, nullptr, "bf16");
  // Every GPU runs kvfp4s and kvi8r (off Hopper by their decode paths, the
  // default there); compute capability 8.9 and newer kvi8s (off Hopper its
  // mma.sync kernel: the compute_89 PTX under CUDA_FORCE_PTX_JIT) and kvmix.
  std::vector<std::string> tiers = {"kvi8r", "kvfp4s"};
  if (cuda::arch::device_compute_capability() >= 89) tiers.insert(tiers.end(), {"kvi8s", "kvmix"});
  for (const std::string& tier : tiers) {
    ASSERT_TRUE(g.be->has_kv_tier(parse_kv_tier(tier)))
        << tier << ": every GPU runs kvfp4s and kvi8r, compute capability 8.9+ all four";
    const std::vector<uint16_t> stock = g.run(x0, nullptr, tier);
    EXPECT_FALSE(bits_equal(stock, exact)) << tier << " gave the exact bits";
    for (const StreamChunks& c :
         {StreamChunks{.q_chunk = 1, .kv_chunk = 1, .mlp_chunk = 1},
          StreamChunks{.q_chunk = 64, .kv_chunk = 64, .mlp_chunk = 64, .kv_block = 128},
          kPrimeChunks, StreamChunks{.q_chunk = seq, .kv_chunk = seq, .mlp_chunk = seq}})
      EXPECT_TRUE(bits_equal(stock, g.run(x0, &c, tier)))
          << fmt::format("{}: seq {} q {} kv {} mlp {} kv_block {}", tier, seq, c.q_chunk,
                         c.kv_chunk, c.mlp_chunk, c.kv_block);
  }
}

// The block on the GPU and the CPU differ only by reduction order and bf16
// rounding of intermediates: compare the block's update (out - x0), over the
// whole tensor, per row and as the largest single error (deviation.hpp).
TEST_P(GpuBlockExact, MatchesTheCpuReferenceWithinTolerance) {
  const ModelWeights& w = weights_for(GetParam());
  const PackedLayout layout = small_layout(w.config, 20, 10, 300, false, false);
  GpuBlock g(w, layout);
  BlockHarness cpu(w, layout);
  const std::vector<uint16_t> x0 = random_x(layout.seq_len * w.config.hidden, 5);
  const std::vector<uint16_t> gpu = g.run(x0, nullptr);
  std::vector<uint16_t> ref = x0;
  run_block_stock(*cpu.be, cpu.arena, cpu.view(), cpu.tensor(ref));
  const int64_t cols = w.config.hidden;
  auto value = [&](const std::vector<uint16_t>& v, int64_t r, int64_t c) {
    const size_t i = size_t(r * cols + c);
    return double(bf16_to_f32(bf16{v[i]})) - double(bf16_to_f32(bf16{x0[i]}));
  };
  const Deviation d = measure_deviation(
      layout.seq_len, cols, [&](int64_t r, int64_t c) { return value(gpu, r, c); },
      [&](int64_t r, int64_t c) { return value(ref, r, c); });
  std::cout << "[ deviation ] block update " << format_name(GetParam()) << " | " << layout.seq_len
            << " tokens | " << d.describe() << "\n";
  // bf16 intermediates differ by an ulp here and there (2^-8 relative). The
  // int8/W4A8 paths amplify that: a 1-ulp input difference can move a ConvRot
  // quantisation level. Measured on the H200 (2026-12-01; rel-rms as on 11-30):
  // bf16 rel-rms 0.0083, worst row 0.0351, largest error 0.288 of the update's RMS;
  // nvfp4 0.0079 / 0.0365 / 0.287; int8 0.0242 / 0.0501 / 0.433; w4a8 0.0243 / 0.0463 /
  // 0.428. Bounds: rel-rms as before (a 2e-2 bound failed for int8/w4a8 on 11-30), row
  // and largest error 2x the larger of each pair.
  const bool quantised = GetParam() == WeightFormat::int8 || GetParam() == WeightFormat::w4a8;
  const DeviationBound bound =
      quantised ? DeviationBound{4e-2, 0.1, 0.87} : DeviationBound{1.5e-2, 0.073, 0.58};
  expect_within(d, bound, std::string(format_name(GetParam())));
}

INSTANTIATE_TEST_SUITE_P(Formats, GpuBlockExact,
                         ::testing::Values(WeightFormat::bf16, WeightFormat::int8,
                                           WeightFormat::w4a8, WeightFormat::nvfp4),
                         [](const auto& p) { return std::string(format_name(p.param)); });

TEST(GpuForward, StreamedEqualsStockBitForBit) {
  H3S_REQUIRE_GPU();
  for (WeightFormat f :
       {WeightFormat::int8, WeightFormat::bf16, WeightFormat::w4a8, WeightFormat::nvfp4}) {
    SCOPED_TRACE(format_name(f));
    const ModelWeights& w = weights_for(f);
    const PackedLayout l = small_layout(w.config, 23, 9, 331, true, true);
    const ForwardInputs in = random_inputs(w.config, l, 3);
    auto run = [&](const ExecOptions& o) {
      cuda::CudaMemory mem;
      Arena arena(mem, 0);
      auto be = make_gpu_backend(arena);
      return run_forward(*be, arena, w, l, in, o);
    };
    const ExecOptions o = streamed_options(64, 100, 77, 128, 50);
    const ForwardOutputs a = run(ExecOptions::stock()), b = run(o);
    ASSERT_EQ(a.video.size(), b.video.size());
    EXPECT_EQ(std::memcmp(a.video.data(), b.video.data(), a.video.size() * 4), 0);
    EXPECT_EQ(std::memcmp(a.audio.data(), b.audio.data(), a.audio.size() * 4), 0);
    EXPECT_LT(b.peak_bytes, a.peak_bytes);
  }
}

// The forward on real inputs on the GPU: streamed == stock bit for bit, and
// the CPU reference's predictions within the block tolerance (rel-rms 1e-2).
TEST(GpuLatentForward, StreamedEqualsStockAndMatchesTheCpu) {
  H3S_REQUIRE_GPU();
  for (WeightFormat f : {WeightFormat::int8, WeightFormat::bf16}) {
    SCOPED_TRACE(format_name(f));
    const ModelWeights& w = weights_for(f);
    const ModelConfig& c = w.config;
    auto random = [](DType t, std::vector<int64_t> shape, uint64_t seed, float scale) {
      Array a(t, std::move(shape));
      Rng r(seed);
      for (int64_t i = 0; i < a.numel(); ++i)
        a.data<uint16_t>()[i] = f32_to_bf16(scale * r.normal()).bits;
      return a;
    };
    const Array video = random(DType::bf16, {1, c.video_latent, 3, 10, 9}, 1, 1.0f);
    const Array audio = random(DType::bf16, {1, c.audio_latent, 2, 20}, 2, 1.0f);
    const Array context = random(DType::bf16, {1, 17, c.text_dim}, 3, 0.5f);
    const Array cond = random(DType::bf16, {1, c.video_latent, 1, 10, 10}, 4, 1.0f);
    LatentInputs in;
    in.video_latent = video.ref();
    in.audio_latent = audio.ref();
    in.context = context.ref();
    in.cond_latent = cond.ref();
    in.sigma = 0.55f;
    auto run = [&](const ExecOptions& o) {
      cuda::CudaMemory mem;
      Arena arena(mem, 0);
      auto be = make_gpu_backend(arena);
      return run_latent_forward(*be, arena, w, in, o);
    };
    const LatentOutputs stock = run(ExecOptions::stock());
    const LatentOutputs streamed = run(streamed_options(64, 100, 77, 128, 50));
    EXPECT_EQ(streamed.report.streamed_blocks, c.blocks);
    EXPECT_EQ(stock.video.bytes, streamed.video.bytes);
    EXPECT_EQ(stock.audio.bytes, streamed.audio.bytes);
    HostMemory host;
    Arena cpu_arena(host, 0);
    auto cpu = make_cpu_backend(4);
    const LatentOutputs ref = run_latent_forward(*cpu, cpu_arena, w, in, ExecOptions::stock());
    auto rel_rms = [](const Array& a, const Array& b) {
      double num = 0, den = 0;
      for (int64_t i = 0; i < a.numel(); ++i) {
        const double x = bf16_to_f32(bf16{a.data<uint16_t>()[i]});
        const double y = bf16_to_f32(bf16{b.data<uint16_t>()[i]});
        num += (x - y) * (x - y);
        den += y * y;
      }
      return std::sqrt(num / den);
    };
    const double rv = rel_rms(stock.video, ref.video), ra = rel_rms(stock.audio, ref.audio);
    std::printf("[ measured ] %s forward GPU vs CPU rel-rms video %.3g audio %.3g\n",
                std::string(format_name(f)).c_str(), rv, ra);
    EXPECT_LE(rv, 1e-2);
    EXPECT_LE(ra, 1e-2);
  }
}

}  // namespace
}  // namespace h3s::test

namespace h3s::test {
namespace {

// Weights on the GPU under a device budget: resident, streamed with the
// prefetch worker (copies on each slot store's stream, the compute stream
// waiting on them) and streamed one block at a time all give the unbudgeted
// stock bits, inside the budget; from a mapped file too.
TEST(GpuForward, WeightResidencyPlansGiveTheStockBits) {
  H3S_REQUIRE_GPU();
  for (WeightFormat f : {WeightFormat::int8, WeightFormat::w4a8, WeightFormat::bf16}) {
    SCOPED_TRACE(format_name(f));
    const ModelWeights& w = weights_for(f);
    const PackedLayout l = small_layout(w.config, 23, 9, 331, true, true);
    const ForwardInputs in = random_inputs(w.config, l, 3);
    auto run = [&](const ModelWeights& weights, const ExecOptions& o) {
      cuda::CudaMemory mem;
      Arena arena(mem, 0);
      auto be = make_gpu_backend(arena);
      return run_forward(*be, arena, weights, l, in, o);
    };
    ExecOptions o = streamed_options(64, 100, 77, 0, 50);
    size_t est = 0, extras = 0, block = 0;
    {
      cuda::CudaMemory mem;
      Arena arena(mem, 0);
      auto be = make_gpu_backend(arena);
      const WeightPlan all = plan_weights(*be, w, 0);
      est = estimate_activation_peak(w.config, l, o, scratch_model(*be, w, o.kv_store));
      extras = all.extras_bytes;
      block = all.block_bytes;
    }
    const ForwardOutputs stock = run(w, ExecOptions::stock());
    const std::string path = ::testing::TempDir() + "/h3s_gpu_residency.safetensors";
    write_checkpoint(w, path);
    const ModelWeights mapped = load_checkpoint(path);
    for (const auto& [budget, prefetch] :
         {std::pair<size_t, int>{est + extras + 2 * block, 1}, {est + extras + block, 0}})
      for (const ModelWeights* src : {&w, &mapped}) {
        SCOPED_TRACE(::testing::Message() << "budget " << budget << (src == &w ? "" : " file"));
        o.vram_budget = budget;
        const ForwardOutputs s = run(*src, o);
        EXPECT_EQ(s.weights.residency, Residency::streamed);
        EXPECT_EQ(s.weights.prefetch, prefetch);
        ASSERT_EQ(s.video.size(), stock.video.size());
        EXPECT_EQ(std::memcmp(s.video.data(), stock.video.data(), s.video.size() * 4), 0);
        EXPECT_EQ(std::memcmp(s.audio.data(), stock.audio.data(), s.audio.size() * 4), 0);
        EXPECT_LE(s.peak_bytes + s.weights_peak_bytes, budget);
      }
    std::remove(path.c_str());
  }
}

}  // namespace
}  // namespace h3s::test
