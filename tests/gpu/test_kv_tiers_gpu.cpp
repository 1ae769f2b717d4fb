// The kvi8r K/V tier on the GPU (Hopper's kernel; any GPU by its decode
// path, the default off Hopper, attn_kernel sm80 on Hopper). Its row ops (the quantiser, the
// queries' rotation, the un-rotating finish, the decode) are bit-equal to the definition of record
// the CPU backend runs (kvfmt/kvi8r.hpp). Its attention (int8 codes converted to fp16 in shared
// memory and wgmma on Hopper; or blocks decoded to fp16 in global memory and the mma.sync kernel's
// fp16 instance) differs from the definition only in the order of the q.k dot and in rounding P to
// fp16: bounded against the CPU, and its error against the exact attention measured beside the
// CPU's. Inside the tier, query-row chunks and chained K/V blocks give the single pass's bits; the
// streamed block equals the tier's stock block bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/dtype.hpp"
#include "core/rng.hpp"
#include "deviation.hpp"
#include "gpu_fixture.hpp"
#include "kv/kv_i8r.hpp"
#include "kvfmt/kvi8r.hpp"

namespace h3s::test {
namespace {

constexpr int64_t kHd = 128;
using Bits = std::vector<uint16_t>;

Bits random_bf16(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  Bits v(static_cast<size_t>(n));
  for (uint16_t& x : v) x = f32_to_bf16(scale * r.normal()).bits;
  return v;
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// q, k, v [rows or seq, heads * 128] and what the tier makes of them.
struct Problem {
  int64_t rows, seq, heads;
  Bits q, k, v;
  Problem(int64_t r, int64_t s, int64_t h, uint64_t seed)
      : rows(r),
        seq(s),
        heads(h),
        q(random_bf16(r * h * kHd, seed)),
        k(random_bf16(s * h * kHd, seed + 1)),
        v(random_bf16(s * h * kHd, seed + 2)) {}
  int64_t width() const { return heads * kHd; }
  std::string label() const {
    return std::to_string(rows) + " rows x " + std::to_string(seq) + " keys x " +
           std::to_string(heads) + " heads";
  }
};

class GpuKvi8r : public GpuBackendTest {
 protected:
  void SetUp() override {
    GpuBackendTest::SetUp();
    if (!gpu_) return;  // skipped
    if (!gpu_->has_kv_tier(KvTier::kvi8r))
      GTEST_FAIL() << "this GPU has no kvi8r kernel (Hopper only); the device runs are on H200";
  }

  // The tier on `be` over `arena`: quantise K/V, rotate q, attend in query
  // chunks of `row_chunk` (0: all) and K/V blocks of `kv_block` (0: one
  // pass), finish. `exact`: the exact bf16 attention instead. The scales
  // lie head-major as KvI8rStore's, or [seq, heads] (`by_key_scales`: the
  // same bits, a sector per key's load).
  Bits run(Backend& be, Arena& arena, const Problem& p, int64_t row_chunk, int64_t kv_block,
           bool exact = false, bool by_key_scales = false) {
    auto put = [&](const Bits& host, int64_t n, const char* what) {
      OwnedTensor t = arena.tensor(DType::bf16, {n, p.width()}, what);
      be.upload(host.data(), t.view);
      return t;
    };
    OwnedTensor q = put(p.q, p.rows, "q"), k = put(p.k, p.seq, "k"), v = put(p.v, p.seq, "v");
    OwnedTensor out = arena.tensor(DType::bf16, {p.rows, p.width()}, "out");
    OwnedTensor kc = arena.tensor(DType::u8, {p.seq, p.width()}, "K codes");
    OwnedTensor vc = arena.tensor(DType::u8, {p.seq, p.width()}, "V codes");
    auto scales = [&](const char* what) {
      return by_key_scales
                 ? arena.tensor(DType::f16, {p.seq, p.heads}, what)
                 : arena.tensor(DType::f16, {p.heads, KvI8rStore::scale_row(p.seq)}, what);
    };
    OwnedTensor ks_owned = scales("K scales"), vs_owned = scales("V scales");
    const Tensor ks =
        by_key_scales ? ks_owned.view : KvI8rStore::scales_by_key(ks_owned.view, p.seq);
    const Tensor vs =
        by_key_scales ? vs_owned.view : KvI8rStore::scales_by_key(vs_owned.view, p.seq);
    if (!exact) {
      be.kvi8r_quantize(k.view, kc.view, ks);
      be.kvi8r_quantize(v.view, vc.view, vs);
      be.rotate_heads(q.view);
    }
    const int64_t step = row_chunk == 0 ? p.rows : row_chunk;
    const int64_t block = kv_block == 0 ? p.seq : kv_block;
    for (int64_t r0 = 0; r0 < p.rows; r0 += step) {
      const int64_t r1 = std::min(p.rows, r0 + step);
      AttnState s = AttnState::allocate(arena, r1 - r0, p.heads, kHd);
      be.attn_state_reset(s);
      const Tensor qc = q.view.rows_view(r0, r1);
      for (int64_t b = 0; b < p.seq; b += block) {
        const RowRange keys{b, std::min(p.seq, b + block)};
        if (exact) {
          Tensor k3 = k.view, v3 = v.view;
          for (Tensor* t : {&k3, &v3}) {
            t->rank = 3;
            t->shape = {p.seq, p.heads, kHd};
            t->stride = {p.width(), kHd, 1};
          }
          be.attention(qc, KvView{k3, v3}, keys, s);
        } else {
          be.attention_kvi8r(qc, KvI8View{kc.view, ks, vc.view, vs}, keys, s);
        }
      }
      if (exact)
        be.attn_state_finish(s, out.view.rows_view(r0, r1));
      else
        be.attn_state_finish_rotated(s, out.view.rows_view(r0, r1));
    }
    Bits host(static_cast<size_t>(p.rows * p.width()));
    be.download(out.view, host.data());
    be.synchronize();
    return host;
  }
  Bits on_gpu(const Problem& p, int64_t row_chunk = 0, int64_t kv_block = 0, bool exact = false,
              bool by_key_scales = false) {
    return run(*gpu_, *arena_, p, row_chunk, kv_block, exact, by_key_scales);
  }
  Bits on_cpu(const Problem& p, bool exact = false) {
    HostMemory memory;
    Arena arena(memory, 0);
    return run(*cpu_, arena, p, 0, 0, exact);
  }

  // The attention against the definition (CPU), and both against the exact
  // attention: the GPU's tier error must be the definition's. Lengths: one
  // key, a partial tile, tiles plus a tail.
  void expect_matches_definition(uint64_t seed, const char* path);
  // Row chunks (down to 1 row) and chained K/V blocks give the single
  // pass's bits; so does a second run.
  void expect_single_pass_bits(const Problem& p);
};

double value(uint16_t bits) {
  return bf16_to_f32(bf16{bits});
}

Deviation deviation(const Problem& p, const Bits& got, const Bits& want) {
  const int64_t w = p.width();
  return measure_deviation(
      p.rows, w, [&](int64_t r, int64_t c) { return value(got[size_t(r * w + c)]); },
      [&](int64_t r, int64_t c) { return value(want[size_t(r * w + c)]); });
}

// Quantiser, rotation and finish: the definition's bits, including rows the
// rounding finds hard (zeros, huge values, one outlier channel).
TEST_F(GpuKvi8r, RowOpsAreTheDefinitionsBits) {
  HostMemory memory;
  Arena host(memory, 0);
  for (const auto& [rows, heads] : {std::pair<int64_t, int64_t>{1, 1}, {37, 3}, {130, 56}}) {
    const int64_t w = heads * kHd;
    Bits src = random_bf16(rows * w, uint64_t(rows * 100 + heads));
    for (int64_t c = 0; c < w && rows > 2; ++c) {
      src[size_t(w + c)] = 0;                                                    // row 1: zeros
      src[size_t(2 * w + c)] = f32_to_bf16(3e4f * (c % 2 ? 1.0f : -1.0f)).bits;  // row 2: huge
    }
    src[5] = f32_to_bf16(900.0f).bits;  // an outlier channel in row 0
    auto quantise = [&](Backend& be, Arena& arena) {
      OwnedTensor s = arena.tensor(DType::bf16, {rows, w}, "src");
      OwnedTensor code = arena.tensor(DType::u8, {rows, w}, "code");
      OwnedTensor scale = arena.tensor(DType::f16, {rows, heads}, "scale");
      be.upload(src.data(), s.view);
      be.kvi8r_quantize(s.view, code.view, scale.view);
      be.rotate_heads(s.view);
      std::vector<uint8_t> c(size_t(rows * w));
      Bits sc(size_t(rows * heads)), rot(src.size());
      be.download(code.view, c.data());
      be.download(scale.view, sc.data());
      be.download(s.view, rot.data());
      be.synchronize();
      return std::tuple{c, sc, rot};
    };
    const auto [gc, gs, grot] = quantise(*gpu_, *arena_);
    const auto [cc, cs, crot] = quantise(*cpu_, host);
    EXPECT_TRUE(same_bytes(gc, cc)) << rows << " x " << heads << ": codes";
    EXPECT_TRUE(same_bytes(gs, cs)) << rows << " x " << heads << ": scales";
    EXPECT_TRUE(same_bytes(grot, crot)) << rows << " x " << heads << ": rotate_heads";

    // The finish from one random state on both backends.
    Rng r(uint64_t(rows + heads));
    std::vector<float> m(size_t(rows * heads)), l(m.size()), acc(size_t(rows * w));
    for (size_t i = 0; i < l.size(); ++i) l[i] = 0.5f + 3.0f * r.uniform();
    for (float& a : acc) a = 2.0f * r.normal();
    auto finish = [&](Backend& be, Arena& arena) {
      AttnState s = AttnState::allocate(arena, rows, heads, kHd);
      be.upload(m.data(), s.m.view);
      be.upload(l.data(), s.l.view);
      be.upload(acc.data(), s.acc.view);
      OwnedTensor out = arena.tensor(DType::bf16, {rows, w}, "out");
      be.attn_state_finish_rotated(s, out.view);
      Bits o(size_t(rows * w));
      be.download(out.view, o.data());
      be.synchronize();
      return o;
    };
    EXPECT_TRUE(same_bytes(finish(*gpu_, *arena_), finish(*cpu_, host)))
        << rows << " x " << heads << ": finish_rotated";
  }
}

void GpuKvi8r::expect_matches_definition(uint64_t seed, const char* path) {
  for (const auto& [rows, seq, heads] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {67, 100, 2}, {300, 1000, 3}}) {
    const Problem p(rows, seq, heads, ++seed);
    const Bits gpu = on_gpu(p), cpu = on_cpu(p), exact = on_gpu(p, 0, 0, /*exact=*/true);
    const Deviation vs_cpu = deviation(p, gpu, cpu);
    const Deviation gpu_err = deviation(p, gpu, exact), cpu_err = deviation(p, cpu, exact);
    std::printf("[ deviation ] kvi8r (%s) attention vs its definition | %s | %s\n", path,
                p.label().c_str(), vs_cpu.describe().c_str());
    std::printf("[ deviation ] kvi8r (%s) vs exact | %s | GPU rel-rms %.4g, CPU rel-rms %.4g\n",
                path, p.label().c_str(), gpu_err.rel_rms, cpu_err.rel_rms);
    // bf16(p * scale_v) adds ~2^-9 relative error per term, fp16 (the
    // default) ~2^-12; the dot order ~1e-6. Measured on the H200 at 300 x
    // 1000 x 3: bf16 2.6e-3 rel-rms, fp16 8.3e-4 (worst row 3.2e-3 / 1.5e-3,
    // largest 1.9e-2 of the RMS: one bf16 output ulp). Bound 3e-3 rel-rms,
    // 2e-2 worst row, 0.1 of the RMS for one element.
    expect_within(vs_cpu, DeviationBound{3e-3, 2e-2, 0.1}, p.label() + " vs the definition");
    EXPECT_NEAR(gpu_err.rel_rms, cpu_err.rel_rms, 0.05 * cpu_err.rel_rms + 1e-4) << p.label();
    if (seq > 1) {
      EXPECT_GT(gpu_err.rel_rms, 1e-3) << p.label() << ": the tier is not the exact store";
    }
  }
}

TEST_F(GpuKvi8r, AttentionMatchesTheDefinition) {
  expect_matches_definition(7100, "Hopper kernel");
}

void GpuKvi8r::expect_single_pass_bits(const Problem& p) {
  const Bits single = on_gpu(p);
  EXPECT_TRUE(same_bytes(on_gpu(p), single)) << "repeated run";
  for (const auto& [chunk, block] :
       {std::pair<int64_t, int64_t>{1, 0}, {64, 0}, {131, 0}, {0, 128}, {0, 384}, {7, 256}})
    EXPECT_TRUE(same_bytes(on_gpu(p, chunk, block), single))
        << p.label() << ", row chunk " << chunk << ", kv_block " << block;
}

// Inside the tier: row chunks and chained K/V blocks give the single pass's bits.
TEST_F(GpuKvi8r, ChunksAndBlocksGiveTheSinglePassBits) {
  expect_single_pass_bits(Problem(259, 1000, 3, 7200));
}

// The kernel gives one set of bits (its conversion is per element) over one
// query block, an odd count of blocks, partial last tiles, chunked queries and
// chained K/V blocks whose keys start mid-sequence, and with [seq, heads]
// scales the head-major store's. (Its variants that lost gave these same
// bits: bench/results/experiments/removed_kvi8r_variants.diff.)
TEST_F(GpuKvi8r, ShapesChunksAndScaleLayoutsGiveTheSameBits) {
  uint64_t seed = 7300;
  for (const auto& [rows, seq, heads] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                                         {67, 60, 2},
                                         {131, 100, 1},
                                         {300, 1000, 3},
                                         {513, 389, 2}}) {
    const Problem p(rows, seq, heads, ++seed);
    const Bits want = on_gpu(p);
    EXPECT_TRUE(same_bytes(on_gpu(p), want)) << p.label() << ", repeated";
    EXPECT_TRUE(same_bytes(on_gpu(p, 61, 256), want))
        << p.label() << ", 61-row chunks, 256-key blocks";
    EXPECT_TRUE(same_bytes(on_gpu(p, 0, 128), want)) << p.label() << ", 128-key blocks";
    EXPECT_TRUE(same_bytes(on_gpu(p, 61, 256, false, /*by_key_scales=*/true), want))
        << p.label() << ", [seq, heads] scales";
  }
}

// kvi8r's decode path (the path of GPUs without the Hopper kernel, run here
// on the sm80 route on any GPU): blocks of 4096 keys decoded to the
// definition's fp16 K~/V~ (kvi8r_decode), attended by the exact kernel's
// fp16 instance with the state carried.
class GpuKvi8rDecode : public GpuKvi8r {
 protected:
  void SetUp() override {
    GpuKvi8r::SetUp();
    if (gpu_) gpu_->use_kernels(AttnKernel::sm80, gemm_kernel());
  }
};

// The same bound as the Hopper kernel's: the same operands (fp16 q', K~,
// V~ and P), another order of the sums (mma.sync's).
TEST_F(GpuKvi8rDecode, AttentionMatchesTheDefinition) {
  ASSERT_EQ(gpu_->kv_tier_kernel(KvTier::kvi8r), "decode");  // what kvbench records
  expect_matches_definition(7400, "decode path");
}

// Chunks and blocks, and past the 4096-key decode blocks: two whole blocks
// and a tail, chained with K/V blocks that cut them.
TEST_F(GpuKvi8rDecode, ChunksAndBlocksGiveTheSinglePassBits) {
  expect_single_pass_bits(Problem(259, 1000, 3, 7500));
  const Problem longer(37, 9001, 2, 7501);
  const Bits whole = on_gpu(longer);
  for (const auto& [chunk, block] : {std::pair<int64_t, int64_t>{0, 4224}, {11, 384}})
    EXPECT_TRUE(same_bytes(on_gpu(longer, chunk, block), whole))
        << longer.label() << ", row chunk " << chunk << ", kv_block " << block;
}

// The decode kernel and the backend op write the definition's fp16(code x
// scale) (kvi8r::dequantise_f16) for every key and head of a range: one key,
// a partial tile, from a later key to the sequence's end; the scales
// head-major as the store lays them.
TEST_F(GpuKvi8rDecode, DecodeWritesTheDefinitionsFp16) {
  const Problem p(1, 1000, 3, 7600);
  const int64_t w = p.width();
  HostMemory memory;
  Arena cpu_arena(memory, 0);
  std::unique_ptr<KvStore> cpu_store =
      make_resident_kv_store(*cpu_, cpu_arena, KvTier::kvi8r, p.seq, p.heads, kHd, 0, {});
  std::unique_ptr<KvStore> gpu_store =
      make_resident_kv_store(*gpu_, *arena_, KvTier::kvi8r, p.seq, p.heads, kHd, 0, {});
  for (const auto& [be, arena, store] :
       {std::tuple<Backend*, Arena*, KvStore*>{cpu_.get(), &cpu_arena, cpu_store.get()},
        {gpu_.get(), arena_.get(), gpu_store.get()}}) {
    OwnedTensor k = arena->tensor(DType::bf16, {p.seq, w}, "k");
    OwnedTensor v = arena->tensor(DType::bf16, {p.seq, w}, "v");
    be->upload(p.k.data(), k.view);
    be->upload(p.v.data(), v.view);
    store->write(*be, {0, p.seq}, k.view, v.view);
  }
  // The raw kernel below runs on the legacy stream, which does not order
  // against the backend's non-blocking stream: the store must be written.
  gpu_->synchronize();
  const KvI8View gkv = dynamic_cast<const KvI8rStore&>(*gpu_store).view();
  const KvI8View ckv = dynamic_cast<const KvI8rStore&>(*cpu_store).view();
  // The definition, from the CPU store's codes and scales (the quantiser is
  // bit-equal: RowOpsAreTheDefinitionsBits).
  auto want = [&](bool is_k, int64_t key, int64_t h, int64_t d) {
    const Tensor& code = is_k ? ckv.k_code : ckv.v_code;
    const Tensor& scale = is_k ? ckv.k_scale : ckv.v_scale;
    return kvi8r::dequantise_f16(
        code.row<uint8_t>(key)[h * kHd + d],
        scale.ptr<uint16_t>()[key * scale.stride[0] + h * scale.stride[1]]);
  };
  auto count_wrong = [&](const Bits& gk, const Bits& gv, int64_t begin, int64_t n) {
    int64_t wrong = 0;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t h = 0; h < p.heads; ++h)
        for (int64_t d = 0; d < kHd; ++d)
          wrong += (gk[size_t(r * w + h * kHd + d)] != want(true, begin + r, h, d)) +
                   (gv[size_t(r * w + h * kHd + d)] != want(false, begin + r, h, d));
    return wrong;
  };
  for (const auto& [begin, n] :
       {std::pair<int64_t, int64_t>{0, 1}, {0, 100}, {384, 131}, {37, 963}}) {
    DeviceArray<uint16_t> dk(size_t(n * w)), dv(size_t(n * w));
    dk.fill_bytes(0xff);  // NaN bits where nothing is written
    dv.fill_bytes(0xff);
    cuda::kvi8r_decode(gkv.k_code.ptr<uint8_t>(), gkv.v_code.ptr<uint8_t>(),
                       gkv.k_code.row_stride(), gkv.k_scale.ptr<uint16_t>(),
                       gkv.v_scale.ptr<uint16_t>(), gkv.k_scale.stride[0], gkv.k_scale.stride[1],
                       begin, n, p.heads, dk.get(), w, dv.get(), w, nullptr);
    sync_check("kvi8r_decode");
    EXPECT_EQ(count_wrong(dk.download(), dv.download(), begin, n), 0)
        << "kernel, keys [" << begin << ", " << begin + n << ") of " << p.label();
  }
  // The backend op (what the decode path calls) into [keys, heads, 128] views.
  const RowRange keys{256, p.seq};
  OwnedTensor gk = arena_->tensor(DType::f16, {keys.size(), p.heads, kHd}, "K~");
  OwnedTensor gv = arena_->tensor(DType::f16, {keys.size(), p.heads, kHd}, "V~");
  gpu_->kvi8r_decode(gkv, keys, gk.view, gv.view);
  Bits hk(size_t(keys.size() * w)), hv(size_t(keys.size() * w));
  gpu_->download(gk.view, hk.data());
  gpu_->download(gv.view, hv.data());
  gpu_->synchronize();
  EXPECT_EQ(count_wrong(hk, hv, keys.begin, keys.size()), 0) << "backend op";
}

}  // namespace
}  // namespace h3s::test
