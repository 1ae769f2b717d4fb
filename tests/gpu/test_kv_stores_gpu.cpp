// The K/V tiers whose stores quantise in groups of tokens (kvi8s: 64-token
// blocks in 128-token tiles; kvfp4s: 256-token stat blocks) on the GPU
// (kvi8s on sm_89+: wgmma on Hopper, mma.sync elsewhere; kvfp4s on any GPU through its decode path,
// the default; attn_kernel sm90 selects its Hopper kernel). Their quantisers are
// bit-equal to the definitions of record the CPU backend runs (kvfmt/kvi8s.hpp, kvfmt/kvfp4s.hpp),
// through the store's open group (chunks of any size). kvi8s' attention (int8 Q K^T and fp8 P V on
// wgmma) gives the definition's scores bit for bit and differs from it only in ex2.approx, P's 2^8
// folded into the exponent and the order of the fp8 products' sums; kvfp4s' decodes the
// definition's bf16 K~ and V~ and runs the exact kernel's arithmetic on them (bf16 P, ex2.approx,
// the MMA's sum order). Each is bounded against the CPU, and its error against the exact attention
// measured beside the CPU's. Inside a tier, query-row chunks and chained K/V blocks give the single
// pass's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/dtype.hpp"
#include "core/rng.hpp"
#include "deviation.hpp"
#include "gpu_fixture.hpp"
#include "kv/kv_fp4s.hpp"
#include "kv/kv_i8s.hpp"
#include "kvfmt/kvfp4s.hpp"

namespace h3s::test {
namespace {

constexpr int64_t kHd = 128;
using Bits = std::vector<uint16_t>;

// N(0, 1) rows with a K-like structure: a per-channel offset (what the block
// mean removes) and one outlier channel; a few rows all zero.
Bits random_rows(int64_t rows, int64_t width, uint64_t seed, float offset) {
  Rng r(seed);
  Bits v(static_cast<size_t>(rows * width));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t c = 0; c < width; ++c) {
      const float x = r.normal() * (c % kHd == 17 ? 12.0f : 1.0f) + offset * float(c % 7);
      v[size_t(t * width + c)] = f32_to_bf16(t % 97 == 5 ? 0.0f : x).bits;
    }
  return v;
}

struct Problem {
  int64_t rows, seq, heads;
  Bits q, k, v;
  Problem(int64_t r, int64_t s, int64_t h, uint64_t seed)
      : rows(r),
        seq(s),
        heads(h),
        q(random_rows(r, h * kHd, seed, 0.0f)),
        k(random_rows(s, h * kHd, seed + 1, 0.5f)),
        v(random_rows(s, h * kHd, seed + 2, 0.0f)) {}
  int64_t width() const { return heads * kHd; }
  std::string label() const {
    return std::to_string(rows) + " rows x " + std::to_string(seq) + " keys x " +
           std::to_string(heads) + " heads";
  }
};

OwnedTensor put(Backend& be, Arena& arena, const Bits& host, int64_t n, int64_t w,
                const char* what) {
  OwnedTensor t = arena.tensor(DType::bf16, {n, w}, what);
  be.upload(host.data(), t.view);
  return t;
}

// `tier`'s attention of p's queries on `be` (kvmix: heads8 on 8 bits): K/V
// written in chunks of `kv_chunk` rows (0: one write) and attended in blocks
// of `kv_block` keys (0: one pass), queries in chunks of `row_chunk` (0: all).
Bits store_attention(Backend& be, Arena& arena, const Problem& p, const std::string& tier,
                     std::span<const int> heads8, int64_t kv_chunk, int64_t kv_block,
                     int64_t row_chunk) {
  OwnedTensor q = put(be, arena, p.q, p.rows, p.width(), "q");
  OwnedTensor out = arena.tensor(DType::bf16, {p.rows, p.width()}, "out");
  std::unique_ptr<KvStore> store =
      make_resident_kv_store(be, arena, parse_kv_tier(tier), p.seq, p.heads, kHd, kv_block, heads8);
  OwnedTensor k = put(be, arena, p.k, p.seq, p.width(), "k");
  OwnedTensor v = put(be, arena, p.v, p.seq, p.width(), "v");
  const int64_t kv_step = kv_chunk == 0 ? std::max<int64_t>(p.seq, 1) : kv_chunk;
  for (int64_t r0 = 0; r0 < p.seq; r0 += kv_step) {
    const int64_t r1 = std::min(p.seq, r0 + kv_step);
    store->write(be, {r0, r1}, k.view.rows_view(r0, r1), v.view.rows_view(r0, r1));
  }
  const int64_t step = row_chunk == 0 ? p.rows : row_chunk;
  for (int64_t r0 = 0; r0 < p.rows; r0 += step) {
    const int64_t r1 = std::min(p.rows, r0 + step);
    AttnState s = AttnState::allocate(arena, r1 - r0, p.heads, kHd);
    be.attn_state_reset(s);
    const QueryChunk c{q.view.rows_view(r0, r1), &s};
    store->attend(be, {&c, 1});
    store->finish(be, s, out.view.rows_view(r0, r1));
  }
  Bits host(static_cast<size_t>(p.rows * p.width()));
  be.download(out.view, host.data());
  be.synchronize();
  return host;
}

// Every tensor of a store, as bytes, in the view's order.
using StoreBytes = std::vector<std::vector<uint8_t>>;

std::vector<Tensor> store_tensors(const KvStore& store) {
  if (const auto* s = dynamic_cast<const KvI8sStore*>(&store)) {
    const KvI8sView v = s->view();
    return {v.k_code, v.v_code, v.header};
  }
  const KvFp4sView v = dynamic_cast<const KvFp4sStore&>(store).view();
  return {v.k_code, v.k_scale, v.k_global, v.k_mean, v.v_code, v.v_scale, v.v_global};
}

class GpuKvStore : public GpuBackendTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    GpuBackendTest::SetUp();
    if (!gpu_) return;  // skipped
    if (!gpu_->has_kv_tier(parse_kv_tier(tier())))
      GTEST_FAIL() << "this GPU has no " << tier()
                   << " kernel (kvi8s: compute capability 8.9 or newer; kvfp4s runs on every "
                      "GPU); the device "
                      "runs are on H200";
  }
  const std::string& tier() const { return GetParam(); }

  // K/V written into the store in chunks of `chunk` rows (0: one write).
  void write(Backend& be, Arena& arena, KvStore& store, const Problem& p, int64_t chunk) {
    OwnedTensor k = put(be, arena, p.k, p.seq, p.width(), "k");
    OwnedTensor v = put(be, arena, p.v, p.seq, p.width(), "v");
    const int64_t step = chunk == 0 ? std::max<int64_t>(p.seq, 1) : chunk;
    for (int64_t r0 = 0; r0 < p.seq; r0 += step) {
      const int64_t r1 = std::min(p.seq, r0 + step);
      store.write(be, {r0, r1}, k.view.rows_view(r0, r1), v.view.rows_view(r0, r1));
    }
  }

  StoreBytes quantised(Backend& be, Arena& arena, const Problem& p, int64_t chunk) {
    std::unique_ptr<KvStore> store =
        make_resident_kv_store(be, arena, parse_kv_tier(tier()), p.seq, p.heads, kHd, 0);
    write(be, arena, *store, p, chunk);
    StoreBytes out;
    for (const Tensor& t : store_tensors(*store)) {
      out.emplace_back(size_t(t.numel()) * dtype_size(t.dtype));
      be.download(t, out.back().data());
    }
    be.synchronize();
    return out;
  }

  // The tier's attention: the store written in one pass, queries in chunks
  // of `row_chunk` (0: all), K/V in blocks of `kv_block` (0: one pass).
  // `exact`: the exact bf16 attention instead.
  Bits attend(Backend& be, Arena& arena, const Problem& p, int64_t row_chunk, int64_t kv_block,
              bool exact = false) {
    return store_attention(be, arena, p, exact ? "bf16" : tier(), {}, 0, kv_block, row_chunk);
  }
  Bits on_gpu(const Problem& p, int64_t row_chunk = 0, int64_t kv_block = 0, bool exact = false) {
    return attend(*gpu_, *arena_, p, row_chunk, kv_block, exact);
  }
  Bits on_cpu(const Problem& p, bool exact = false) {
    HostMemory memory;
    Arena arena(memory, 0);
    return attend(*cpu_, arena, p, 0, 0, exact);
  }
};

Deviation deviation(const Problem& p, const Bits& got, const Bits& want) {
  const int64_t w = p.width();
  auto value = [](uint16_t bits) { return double(bf16_to_f32(bf16{bits})); };
  return measure_deviation(
      p.rows, w, [&](int64_t r, int64_t c) { return value(got[size_t(r * w + c)]); },
      [&](int64_t r, int64_t c) { return value(want[size_t(r * w + c)]); });
}

// Codes, scales, means and globals: the definition's bytes, written in one
// pass or in chunks that leave groups open (1 row, a prime, a tile and a
// half).
TEST_P(GpuKvStore, QuantiserIsTheDefinitionsBytes) {
  uint64_t seed = 8100;
  for (const auto& [seq, heads] :
       {std::pair<int64_t, int64_t>{1, 1}, {100, 2}, {128, 1}, {300, 3}, {1000, 2}}) {
    const Problem p(1, seq, heads, ++seed);
    HostMemory memory;
    Arena arena(memory, 0);
    const StoreBytes cpu = quantised(*cpu_, arena, p, 0);
    for (const int64_t chunk : {int64_t(0), int64_t(1), int64_t(67), int64_t(192)}) {
      if (chunk == 1 && seq > 300) continue;  // one row a write: slow, and 300 covers it
      const StoreBytes gpu = quantised(*gpu_, *arena_, p, chunk);
      ASSERT_EQ(gpu.size(), cpu.size());
      for (size_t i = 0; i < gpu.size(); ++i)
        EXPECT_EQ(gpu[i], cpu[i]) << tier() << " tensor " << i << ", " << p.label() << ", chunk "
                                  << chunk;
    }
  }
}

// The attention against the definition (CPU), and both against the exact
// attention: the GPU's tier error must be the definition's. Lengths: one
// key, a partial tile, tiles plus a tail.
TEST_P(GpuKvStore, AttentionMatchesTheDefinition) {
  uint64_t seed = 8200;
  for (const auto& [rows, seq, heads] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {67, 100, 2}, {300, 1000, 3}}) {
    const Problem p(rows, seq, heads, ++seed);
    const Bits gpu = on_gpu(p), cpu = on_cpu(p), exact = on_gpu(p, 0, 0, /*exact=*/true);
    const Deviation vs_cpu = deviation(p, gpu, cpu);
    const Deviation gpu_err = deviation(p, gpu, exact), cpu_err = deviation(p, cpu, exact);
    std::printf("[ deviation ] %s attention vs its definition | %s | %s\n", tier().c_str(),
                p.label().c_str(), vs_cpu.describe().c_str());
    std::printf("[ deviation ] %s vs exact | %s | GPU rel-rms %.4g, CPU rel-rms %.4g\n",
                tier().c_str(), p.label().c_str(), gpu_err.rel_rms, cpu_err.rel_rms);
    // kvi8s: ex2.approx (2 ulp) moves a probability's fp8 rounding now and
    // then by one e4m3 step (2^-4 relative); kvfp4s: P in bf16 (2^-9). Bound
    // 1e-2 rel-rms, 5e-2 worst row.
    expect_within(vs_cpu, DeviationBound{1e-2, 5e-2, 0.5}, p.label() + " vs the definition");
    EXPECT_NEAR(gpu_err.rel_rms, cpu_err.rel_rms, 0.1 * cpu_err.rel_rms + 1e-4) << p.label();
    if (seq > 1) {
      EXPECT_GT(gpu_err.rel_rms, 1e-3) << p.label() << ": the tier is not the exact store";
    }
  }
}

// Inside the tier: row chunks (down to 1 row) and chained K/V blocks give
// the single pass's bits; so does a second run.
TEST_P(GpuKvStore, ChunksAndBlocksGiveTheSinglePassBits) {
  const Problem p(259, 1000, 3, 8300);
  const Bits single = on_gpu(p);
  EXPECT_EQ(on_gpu(p), single) << "repeated run";
  for (const auto& [chunk, block] :
       {std::pair<int64_t, int64_t>{1, 0}, {64, 0}, {131, 0}, {0, 128}, {0, 384}, {7, 256}})
    EXPECT_EQ(on_gpu(p, chunk, block), single) << "row chunk " << chunk << ", kv_block " << block;
  // Past kvfp4s' decode blocks (16384 keys on Hopper, 4096 elsewhere and on
  // the sm80 route, which this runs on every GPU): two whole blocks and a
  // tail, chained with K/V blocks that cut them, give the single pass's bits.
  const Problem longer(37, 9001, 2, 8301);
  gpu_->use_kernels(AttnKernel::sm80, gemm_kernel());
  ASSERT_EQ(gpu_->kv_tier_decode_keys(KvTier::kvfp4s), kKvDecodeKeys);
  const Bits whole = on_gpu(longer);
  EXPECT_EQ(on_gpu(longer), whole) << longer.label() << ", repeated";
  for (const auto& [chunk, block] : {std::pair<int64_t, int64_t>{0, 4224}, {11, 384}})
    EXPECT_EQ(on_gpu(longer, chunk, block), whole)
        << longer.label() << ", row chunk " << chunk << ", kv_block " << block;
}

INSTANTIATE_TEST_SUITE_P(Tiers, GpuKvStore, ::testing::Values("kvi8s", "kvfp4s"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// kvi8s on mma.sync (attn_fwd_i8s_sm89.cu: the kernel on sm_89+ GPUs other
// than Hopper, and the sm80 route on Hopper) runs the Hopper kernel's
// arithmetic with P V summed by mma.sync instead of wgmma and the row sums
// in fp32 instead of on the tensor cores (the e4m3 P through P V over ones
// rows): chunk-invariant, as accurate against the exact attention as the
// Hopper kernel, and near it. Its tests against the CPU definition run with
// --attn-kernel=sm80 in scripts/device-check.sh, and on its compute_89 PTX
// in the ptx80 step (the code RTX 40/50-series cards run).
class GpuKvi8sKernels : public GpuBackendTest {};

TEST_F(GpuKvi8sKernels, MmaKernelIsChunkInvariantAndNearTheHopperKernel) {
  ASSERT_TRUE(gpu_->has_kv_tier(KvTier::kvi8s)) << "kvi8s runs on compute capability 8.9 and newer";
  // On an sm_89+ card without Hopper's image (scripts/device-check.sh mma there) there is
  // no Hopper kernel to compare with: the rest still runs. The device runs are on Hopper.
  const bool hopper = cuda::arch::hopper_kernels();
  uint64_t seed = 8590;
  for (const auto& [rows, seq, heads] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                                         {67, 100, 2},
                                         {259, 1000, 3},
                                         {131, 4099, 2}}) {
    const Problem p(rows, seq, heads, ++seed);
    gpu_->use_kernels(attn_kernel(), gemm_kernel());
    const Bits exact = store_attention(*gpu_, *arena_, p, "bf16", {}, 0, 0, 0);
    Bits sm90;
    if (hopper) {
      gpu_->use_kernels(AttnKernel::sm90, gemm_kernel());
      ASSERT_EQ(gpu_->kv_tier_kernel(KvTier::kvi8s), "io-pr-ts");
      sm90 = store_attention(*gpu_, *arena_, p, "kvi8s", {}, 0, 0, 0);
    }
    gpu_->use_kernels(AttnKernel::sm80, gemm_kernel());
    ASSERT_EQ(gpu_->kv_tier_kernel(KvTier::kvi8s), "mma");
    const Bits got = store_attention(*gpu_, *arena_, p, "kvi8s", {}, 0, 0, 0);
    EXPECT_EQ(store_attention(*gpu_, *arena_, p, "kvi8s", {}, 0, 0, 0), got)
        << p.label() << ", repeated";
    for (const auto& [block, chunk] :
         {std::pair<int64_t, int64_t>{256, 61}, {128, 1}, {384, 0}, {0, 17}})
      EXPECT_EQ(store_attention(*gpu_, *arena_, p, "kvi8s", {}, 0, block, chunk), got)
          << p.label() << ", kv_block " << block << ", row chunk " << chunk;
    const double err = deviation(p, got, exact).rel_rms;
    if (!hopper) {
      std::printf("[ deviation ] kvi8s mma vs exact | %s | %.5g\n", p.label().c_str(), err);
      if (seq > 1) {
        EXPECT_GT(err, 1e-3) << p.label() << ": the tier is not the exact store";
      }
      continue;
    }
    const Deviation d = deviation(p, got, sm90);
    const double sm90_err = deviation(p, sm90, exact).rel_rms;
    std::printf("[ deviation ] kvi8s mma vs io-pr-ts | %s | %s; vs exact %.5g (io-pr-ts %.5g)\n",
                p.label().c_str(), d.describe().c_str(), err, sm90_err);
    // The row sums differ: each e4m3 P is off its fp32 p by ~3.6% rms, so
    // the two denominators differ by ~0.036 / sqrt(effective keys). Measured
    // between io-pr (this kernel's arithmetic on wgmma) and io-pr-ts (H200,
    // 2026-12-05): 6.9e-3 rel-rms at 100 keys, 4.1e-3 at 1000, 0.31 max |d| /
    // rms, the same error against the exact attention to within 10%; mma.sync
    // against io-pr added 3.1e-4 to 5.2e-4 (H100, 2026-12-05).
    expect_within(d, DeviationBound{1.5e-2, 6e-2, 0.6}, "mma vs io-pr-ts");
    EXPECT_LT(err, 1.1 * sm90_err + 1e-4) << p.label() << " vs exact";
    if (seq >= 100) {
      EXPECT_NE(got, sm90) << p.label()
                           << ": the Hopper kernel's row sums are not the tensor cores'";
    }
  }
}

// kvfp4s' Hopper kernel (dual-batch2, attn_kernel sm90: two producer
// warpgroups decoding the codes into the exact kernel's consumers) and its
// decode path (the default on every GPU: blocks of keys decoded to global
// memory, then the exact kernel) decode the same bf16 K/V (an exact
// decode, one rounding from the exact value) for the same consumers: the
// same bits over one key, a partial tile, tiles plus a tail, 9,001 keys,
// chunked queries and chained K/V blocks.
class GpuKvfp4sKernels : public GpuBackendTest {};

TEST_F(GpuKvfp4sKernels, HopperKernelGivesTheDecodePathsBits) {
  ASSERT_TRUE(cuda::arch::hopper_kernels()) << "the device runs are on Hopper";
  // The table's default whatever the suite's kernels (its automatic is the decode path).
  cuda::CudaBackend table(*arena_, nullptr, AttnKernel::automatic, gemm_kernel());
  ASSERT_EQ(table.kv_tier_kernel(KvTier::kvfp4s), "decode");
  gpu_->use_kernels(AttnKernel::sm90, gemm_kernel());
  ASSERT_EQ(gpu_->kv_tier_kernel(KvTier::kvfp4s), "dual-batch2");
  uint64_t seed = 8600;
  for (const auto& [rows, seq, heads] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                                         {67, 100, 2},
                                         {259, 1000, 3},
                                         {29, 9001, 2}}) {
    const Problem p(rows, seq, heads, ++seed);
    const Bits want = store_attention(table, *arena_, p, "kvfp4s", {}, 0, 0, 0);
    EXPECT_EQ(store_attention(*gpu_, *arena_, p, "kvfp4s", {}, 0, 0, 0), want) << p.label();
    EXPECT_EQ(store_attention(*gpu_, *arena_, p, "kvfp4s", {}, 0, 256, 61), want)
        << p.label() << ", chunks and blocks";
  }
}

// kvfp4s' decode kernel (what GPUs without the Hopper kernel attend over)
// writes the definition's bf16 K~ and V~ (kvfp4s::decode_kv_row) for every
// key and head of a range: from key 0 or a later stat block, one key, a
// partial tile, a range across stat blocks to the sequence's end.
TEST_F(GpuKvfp4sKernels, DecodeKernelWritesTheDefinitionsBf16) {
  ASSERT_TRUE(gpu_->has_kv_tier(KvTier::kvfp4s));
  // What kvbench records: the store's default on every GPU, and the sm80 route's.
  gpu_->use_kernels(AttnKernel::sm80, gemm_kernel());
  EXPECT_EQ(gpu_->kv_tier_kernel(KvTier::kvfp4s), "decode");
  const Problem p(1, 1000, 3, 8700);
  std::unique_ptr<KvStore> store =
      make_resident_kv_store(*gpu_, *arena_, KvTier::kvfp4s, p.seq, p.heads, kHd, 0, {});
  OwnedTensor k = put(*gpu_, *arena_, p.k, p.seq, p.width(), "k");
  OwnedTensor v = put(*gpu_, *arena_, p.v, p.seq, p.width(), "v");
  store->write(*gpu_, {0, p.seq}, k.view, v.view);
  const KvFp4sView kv = dynamic_cast<const KvFp4sStore&>(*store).view();
  gpu_->synchronize();
  StoreBytes host;
  for (const Tensor& t : store_tensors(*store)) {
    host.emplace_back(size_t(t.numel()) * dtype_size(t.dtype));
    gpu_->download(t, host.back().data());
  }
  gpu_->synchronize();
  const auto* k_code = host[0].data();
  const auto* k_scale = host[1].data();
  const auto* k_global = reinterpret_cast<const float*>(host[2].data());
  const auto* k_mean = reinterpret_cast<const uint16_t*>(host[3].data());
  const auto* v_code = host[4].data();
  const auto* v_scale = host[5].data();
  const auto* v_global = reinterpret_cast<const float*>(host[6].data());
  const int64_t code_stride = kv.k_code.row_stride(), scale_stride = kv.k_scale.row_stride();
  const int64_t global_stride = kv.k_global.row_stride(), mean_stride = kv.k_mean.row_stride();
  const cuda::Kvfp4sStore st{kv.k_code.ptr<uint8_t>(),
                             kv.v_code.ptr<uint8_t>(),
                             kv.k_scale.ptr<uint8_t>(),
                             kv.v_scale.ptr<uint8_t>(),
                             code_stride,
                             scale_stride,
                             kv.k_global.ptr<float>(),
                             kv.v_global.ptr<float>(),
                             global_stride,
                             kv.k_mean.ptr<uint16_t>(),
                             mean_stride};
  for (const auto& [begin, n] :
       {std::pair<int64_t, int64_t>{0, 1}, {0, 100}, {384, 131}, {128, 872}}) {
    const int64_t w = p.width();
    DeviceArray<uint16_t> dk(size_t(n * w)), dv(size_t(n * w));
    dk.fill_bytes(0xff);  // NaN bits where nothing is written
    dv.fill_bytes(0xff);
    cuda::kvfp4s_decode(st, begin, n, p.heads, dk.get(), w, dv.get(), w, nullptr);
    sync_check("kvfp4s_decode");
    const Bits gk = dk.download(), gv = dv.download();
    int64_t wrong = 0;
    float row[kvfp4s::kDim];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t h = 0; h < p.heads; ++h) {
        const int64_t key = begin + r, block = key / kvfp4s::kBlock;
        for (const bool keys : {true, false}) {
          kvfp4s::decode_kv_row(
              (keys ? k_code : v_code) + key * code_stride + h * kHd / 2,
              (keys ? k_scale : v_scale) + key * scale_stride + h * kvfp4s::kGroups,
              (keys ? k_global : v_global)[block * global_stride + h],
              keys ? k_mean + block * mean_stride + h * kHd : nullptr, row);
          const Bits& got = keys ? gk : gv;
          for (int64_t d = 0; d < kHd; ++d)
            wrong += got[size_t(r * w + h * kHd + d)] != f32_to_bf16(row[d]).bits;
        }
      }
    EXPECT_EQ(wrong, 0) << "keys [" << begin << ", " << begin + n << ") of " << p.label();
  }
  // The backend op (what the decode path calls) writes the CPU backend's bits
  // into [keys, heads, 128] views, from a later stat block to the end.
  const RowRange keys{384, p.seq};
  OwnedTensor gk = arena_->tensor(DType::bf16, {keys.size(), p.heads, kHd}, "K~");
  OwnedTensor gv = arena_->tensor(DType::bf16, {keys.size(), p.heads, kHd}, "V~");
  gpu_->kvfp4s_decode(kv, keys, gk.view, gv.view);
  HostMemory memory;
  Arena cpu_arena(memory, 0);
  std::unique_ptr<KvStore> cpu_store =
      make_resident_kv_store(*cpu_, cpu_arena, KvTier::kvfp4s, p.seq, p.heads, kHd, 0, {});
  OwnedTensor ck = put(*cpu_, cpu_arena, p.k, p.seq, p.width(), "k");
  OwnedTensor cv = put(*cpu_, cpu_arena, p.v, p.seq, p.width(), "v");
  cpu_store->write(*cpu_, {0, p.seq}, ck.view, cv.view);
  OwnedTensor hk = cpu_arena.tensor(DType::bf16, {keys.size(), p.heads, kHd}, "K~");
  OwnedTensor hv = cpu_arena.tensor(DType::bf16, {keys.size(), p.heads, kHd}, "V~");
  cpu_->kvfp4s_decode(dynamic_cast<const KvFp4sStore&>(*cpu_store).view(), keys, hk.view, hv.view);
  for (const auto& [g, c] : {std::pair{&gk, &hk}, std::pair{&gv, &hv}}) {
    Bits got(size_t(g->view.numel()));
    gpu_->download(g->view, got.data());
    gpu_->synchronize();
    EXPECT_EQ(std::memcmp(got.data(), c->view.ptr<uint16_t>(), got.size() * 2), 0)
        << (g == &gk ? "K~" : "V~") << " of keys [384, " << p.seq << ")";
  }
}

// kvmix on the GPU: each head is its sub-store's head bit for bit (kvi8s'
// for the 8-bit heads, kvfp4s' for the others), whatever the head set and
// the write, query and K/V-block chunks, over a prime number of keys and an
// odd number of heads.
class GpuKvMix : public GpuBackendTest {};

TEST_F(GpuKvMix, EachHeadIsItsSubStoresHeadBitForBit) {
  ASSERT_TRUE(gpu_->has_kv_tier(KvTier::kvmix)) << "kvmix runs on compute capability 8.9 and newer";
  const Problem p(131, 389, 5, 8400);
  const Bits on8 = store_attention(*gpu_, *arena_, p, "kvi8s", {}, 0, 0, 0);
  const Bits on4 = store_attention(*gpu_, *arena_, p, "kvfp4s", {}, 0, 0, 0);
  const std::vector<std::vector<int>> sets = {{}, {0, 1, 2, 3, 4}, {1, 2, 3}, {0, 4}, {3}};
  for (size_t i = 0; i < sets.size(); ++i) {
    const int64_t kv_chunk = std::vector<int64_t>{0, 1, 97, 300, 64}[i];
    const Bits got = store_attention(*gpu_, *arena_, p, "kvmix", sets[i], kv_chunk,
                                     kAttnKvTile * int64_t(i % 3), int64_t(i * 29));
    const int64_t w = p.width();
    for (int64_t h = 0; h < p.heads; ++h) {
      const bool eight = std::find(sets[i].begin(), sets[i].end(), int(h)) != sets[i].end();
      const Bits& want = eight ? on8 : on4;
      bool same = true;
      for (int64_t r = 0; r < p.rows && same; ++r)
        same = std::equal(got.begin() + r * w + h * kHd, got.begin() + r * w + (h + 1) * kHd,
                          want.begin() + r * w + h * kHd);
      EXPECT_TRUE(same) << "set " << i << " head " << h << (eight ? " (8 bits)" : " (4 bits)");
    }
  }
}

}  // namespace
}  // namespace h3s::test
