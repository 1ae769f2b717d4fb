// kvfp4s' definition of record (kvfmt/kvfp4s.hpp): the NVFP4 quantiser's bounds
// and layout, the state carry across key ranges (bit for bit), the bytes per
// element, and its attention error against exact attention, measured (and
// bounded only loosely) beside the rotated-NVFP4-without-centring baseline
// that the K mean improves on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/dot_f32.hpp"
#include "core/dtype.hpp"
#include "core/rng.hpp"
#include "kv/kv_fp4s.hpp"
#include "kvfmt/kvfp4s.hpp"
#include "kvfmt/kvi8r.hpp"

namespace h3s::test {
namespace {

using namespace kvfp4s;

std::vector<uint16_t> random_rows(Rng& r, int64_t n, float spread) {
  std::vector<uint16_t> v(size_t(n * kDim));
  for (size_t i = 0; i < v.size(); ++i) {
    float x = r.normal() * spread;
    if (i % kDim == 3) x *= 20.0f;  // an outlier channel
    v[i] = f32_to_bf16(x).bits;
  }
  return v;
}

// Every decoded V element is its input to within one e2m1 step of its group
// (the widest gap of the e2m1 grid, between 4 and 6, is 2 steps), or, where
// the group's e4m3 scale rounded down, to within its saturation (< 2^-3 of
// the group's largest magnitude). The global and each group's scale are
// bounded from both sides by their definitions (a too-coarse scale fails).
TEST(KvFp4s, QuantiserDecodesWithinAStep) {
  Rng r(21);
  for (const int64_t n : {int64_t(1), int64_t(37), kBlock}) {
    const std::vector<uint16_t> rows = random_rows(r, n, 1.0f);
    std::vector<uint8_t> code(size_t(n * kDim / 2)), scale(size_t(n * kGroups));
    float global = 0.0f;
    quantise_v_block(rows.data(), kDim, n, code.data(), kDim / 2, scale.data(), kGroups, &global);
    float amax = 0.0f;
    for (uint16_t b : rows) amax = std::fmax(amax, std::fabs(bf16_to_f32(bf16{b})));
    // The global: amax / (448 * 6) rounded up to the next bf16 value.
    const float g0 = amax / (kE4m3Max * kE2m1Max);
    EXPECT_EQ(round_bf16(global), global);
    EXPECT_GE(global, g0);
    EXPECT_LT(global, g0 * (1.0f + 0x1p-7f));
    for (int64_t t = 0; t < n; ++t) {
      float out[kDim];
      decode_row(&code[size_t(t * kDim / 2)], &scale[size_t(t * kGroups)], out);
      for (int g = 0; g < kGroups; ++g) {
        float gmax = 0.0f;
        for (int d = g * kGroup; d < (g + 1) * kGroup; ++d)
          gmax = std::fmax(gmax, std::fabs(bf16_to_f32(bf16{rows[size_t(t * kDim + d)]})));
        // The group's scale is e4m3(v), v = min(gmax / 6 / global, 448) rounded to
        // nearest: within half an e4m3 step of v (2^-4 of v where normal, 2^-10
        // where subnormal, below 2^-6), from above as from below.
        const float v = std::min(gmax / kE2m1Max / global, kE4m3Max),
                    s = e4m3_to_f32(scale[size_t(t * kGroups + g)]);
        EXPECT_LE(s, v * (1.0f + 0x1p-4f) + 0x1p-10f) << "token " << t << " group " << g;
        EXPECT_GE(s, v * (1.0f - 0x1p-4f) - 0x1p-10f) << "token " << t << " group " << g;
        const float step = s * global;
        for (int d = g * kGroup; d < (g + 1) * kGroup; ++d) {
          const float x = bf16_to_f32(bf16{rows[size_t(t * kDim + d)]});
          ASSERT_LE(std::fabs(out[d] * global - x), std::max(step, 0.125f * gmax) * 1.0001f)
              << "token " << t << " element " << d;
        }
      }
    }
  }
}

// Centring: the K mean is the block's rotated mean in bf16 and the codes are
// the NVFP4 of the centred rows, so a constant offset added to every key
// leaves the block's scale where it was (up to the mean's bf16 rounding),
// while without centring the offset sets it; K's mean and global are the
// definition's (the global bounded from both sides).
TEST(KvFp4s, CentringRemovesAConstantOffset) {
  Rng r(22);
  const int64_t n = 200;
  std::vector<uint16_t> rows = random_rows(r, n, 1.0f), shifted = rows;
  for (int64_t t = 0; t < n; ++t)
    for (int d = 0; d < kDim; ++d) {
      const float x = bf16_to_f32(bf16{rows[size_t(t * kDim + d)]});
      shifted[size_t(t * kDim + d)] = f32_to_bf16(x + 8.0f).bits;  // 8 is exact beside |x| < 64
    }
  std::vector<uint8_t> c0(size_t(n * kDim / 2)), c1(c0.size()), s0(size_t(n * kGroups)),
      s1(s0.size());
  uint16_t m0[kDim], m1[kDim];
  float g0 = 0.0f, g1 = 0.0f;
  quantise_k_block(rows.data(), kDim, n, c0.data(), kDim / 2, s0.data(), kGroups, &g0, m0);
  quantise_k_block(shifted.data(), kDim, n, c1.data(), kDim / 2, s1.data(), kGroups, &g1, m1);
  EXPECT_NEAR(g1, g0, 0.1f * g0);
  // K's global from its definition, both ways: the max |k' - mean| of the block
  // (k' rotated, mean = bf16 of the fp32 token-order average) / (448 * 6),
  // rounded up to bf16 (below 2^-7 above it: one bf16 step at most).
  {
    std::vector<float> x(size_t(n * kDim));
    float sum[kDim] = {}, amax = 0.0f;
    for (int64_t t = 0; t < n; ++t) {
      for (int d = 0; d < kDim; ++d)
        x[size_t(t * kDim + d)] = bf16_to_f32(bf16{rows[size_t(t * kDim + d)]});
      kvi8r::rotate(x.data() + t * kDim);
      for (int d = 0; d < kDim; ++d) sum[d] += x[size_t(t * kDim + d)];
    }
    for (int d = 0; d < kDim; ++d) {
      const float mu = round_bf16(sum[d] / float(n));
      EXPECT_EQ(bf16_to_f32(bf16{m0[d]}), mu) << d;
      for (int64_t t = 0; t < n; ++t)
        amax = std::fmax(amax, std::fabs(x[size_t(t * kDim + d)] - mu));
    }
    const float k0 = amax / (kE4m3Max * kE2m1Max);
    EXPECT_EQ(round_bf16(g0), g0);
    EXPECT_GE(g0, k0);
    EXPECT_LT(g0, k0 * (1.0f + 0x1p-7f));
  }
  // Without centring, the offset dominates the rotated rows' first element.
  uint16_t zero[kDim];
  quantise_k_block(shifted.data(), kDim, n, c1.data(), kDim / 2, s1.data(), kGroups, &g1, zero,
                   /*centred=*/false);
  for (uint16_t z : zero) EXPECT_EQ(z, 0);
  EXPECT_GT(g1, 2.0f * g0);
}

// The block's tier at H3's shape: at most 0.57 bytes per K/V element.
TEST(KvFp4s, BytesPerElementAtH3Shapes) {
  for (const int64_t seq : {int64_t(217088), int64_t(300001), int64_t(1000)}) {
    const double b = double(store_bytes(seq, 56)) / double(2 * seq * 56 * kDim);
    EXPECT_LE(b, 0.57) << seq;
    EXPECT_GT(b, 0.5625) << seq;  // codes and scales alone
  }
  // The engine's store, its kept tail (up to 255 bf16 rows) included.
  for (const int64_t seq : {int64_t(217088), int64_t(300001)})
    EXPECT_LE(double(KvFp4sStore::bytes(seq, 56, kDim)) / double(2 * seq * 56 * kDim), 0.57) << seq;
}

// The decode's one rounding: bf16_fma_rn is x * g + c rounded once to bf16,
// which a float fma followed by a bf16 rounding gets wrong where the float
// sum lands on a bf16 tie; brute-checked against long double on random
// values of the decode's kinds (e2m1 x e4m3, a bf16 global, a bf16 mean),
// and on hand-made ties.
TEST(KvFp4s, DecodeRoundsOnceFromTheExactValue) {
  Rng r(25);
  int checked = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = e2m1_to_f32(uint8_t(r.below(16))) * e4m3_to_f32(uint8_t(r.below(0x7f)));
    const float g = round_bf16(std::ldexp(1.0f + float(r.uniform()), int(r.below(40)) - 30));
    const float c = round_bf16(r.normal() * std::ldexp(1.0f, int(r.below(40)) - 20));
    const long double exact = (long double)x * g + c;
    const float got = bf16_to_f32(bf16{bf16_fma_rn(x, g, c)});
    // got is a bf16 value within half a bf16 step of the exact value.
    ASSERT_EQ(round_bf16(got), got);
    const long double step = std::ldexp(1.0L, std::ilogb(got == 0.0f ? 1e-30f : got) - 7);
    ASSERT_LE(std::fabs((long double)got - exact), step / 2) << x << " " << g << " " << c;
    ++checked;
  }
  EXPECT_EQ(checked, 200000);
  // 1 + 2^-8 is a bf16 tie (between 1 and 1 + 2^-7); a tiny c decides it.
  EXPECT_EQ(bf16_fma_rn(1.0f + 0x1p-8f, 1.0f, 0x1p-60f), f32_to_bf16(1.0f + 0x1p-7f).bits);
  EXPECT_EQ(bf16_fma_rn(1.0f + 0x1p-8f, 1.0f, -0x1p-60f), f32_to_bf16(1.0f).bits);
  EXPECT_EQ(bf16_fma_rn(1.0f + 0x1p-8f, 1.0f, 0.0f), f32_to_bf16(1.0f).bits);  // to even
  EXPECT_EQ(bf16_fma_rn(3.0f, 0.5f, -1.5f), 0);
}

struct Tier {
  std::vector<uint8_t> kc, vc, ks, vs;
  std::vector<float> kg, vg;
  std::vector<uint16_t> mean;
  HeadRows rows() const {
    return {kc.data(),   ks.data(), vc.data(), vs.data(), kg.data(), vg.data(),
            mean.data(), kDim / 2,  kGroups,   1,         kDim};
  }
};

Tier make_tier(const std::vector<uint16_t>& k, const std::vector<uint16_t>& v, int64_t n,
               bool centred) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  Tier t{std::vector<uint8_t>(size_t(n * kDim / 2)),  std::vector<uint8_t>(size_t(n * kDim / 2)),
         std::vector<uint8_t>(size_t(n * kGroups)),   std::vector<uint8_t>(size_t(n * kGroups)),
         std::vector<float>(size_t(blocks)),          std::vector<float>(size_t(blocks)),
         std::vector<uint16_t>(size_t(blocks * kDim))};
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = b * kBlock, rows = std::min(kBlock, n - r0);
    quantise_k_block(&k[size_t(r0 * kDim)], kDim, rows, &t.kc[size_t(r0 * kDim / 2)], kDim / 2,
                     &t.ks[size_t(r0 * kGroups)], kGroups, &t.kg[size_t(b)],
                     &t.mean[size_t(b * kDim)], centred);
    quantise_v_block(&v[size_t(r0 * kDim)], kDim, rows, &t.vc[size_t(r0 * kDim / 2)], kDim / 2,
                     &t.vs[size_t(r0 * kGroups)], kGroups, &t.vg[size_t(b)]);
  }
  return t;
}

// Keys attended in two calls ([0, 384), [384, n)) carry the state to the
// same bits as one call: the property the streamed block's K/V blocks need.
TEST(KvFp4s, StateCarriesAcrossKeyRangesBitForBit) {
  Rng r(23);
  const int64_t n = 700;
  const std::vector<uint16_t> k = random_rows(r, n, 1.0f), v = random_rows(r, n, 1.0f),
                              q = random_rows(r, 1, 1.0f);
  const Tier t = make_tier(k, v, n, true);
  float m1 = -INFINITY, l1 = 0.0f, a1[kDim] = {}, m2 = -INFINITY, l2 = 0.0f, a2[kDim] = {};
  auto w = std::make_unique<Scratch>();
  attend_row(q.data(), t.rows(), 0, n, m1, l1, a1, *w);
  attend_row(q.data(), t.rows(), 0, 384, m2, l2, a2, *w);
  attend_row(q.data(), t.rows(), 384, n, m2, l2, a2, *w);
  EXPECT_EQ(std::memcmp(&m1, &m2, 4), 0);
  EXPECT_EQ(std::memcmp(&l1, &l2, 4), 0);
  EXPECT_EQ(std::memcmp(a1, a2, sizeof a1), 0);
}

// attend_rows (the CPU backend's: each key tile decoded once for a block of
// query rows) gives every row attend_row's bits.
TEST(KvFp4s, RowBlocksGiveTheSingleRowBits) {
  Rng r(26);
  const int64_t n = 300, nq = 5;
  const std::vector<uint16_t> k = random_rows(r, n, 1.0f), v = random_rows(r, n, 1.0f),
                              q = random_rows(r, nq, 1.0f);
  const Tier t = make_tier(k, v, n, true);
  auto w = std::make_unique<Scratch>();
  std::vector<float> m(nq, -INFINITY), l(nq, 0.0f), acc(size_t(nq * kDim), 0.0f);
  attend_rows(q.data(), kDim, nq, t.rows(), 0, n, m.data(), l.data(), 1, acc.data(), kDim, *w);
  for (int64_t i = 0; i < nq; ++i) {
    float m1 = -INFINITY, l1 = 0.0f, a1[kDim] = {};
    attend_row(&q[size_t(i * kDim)], t.rows(), 0, n, m1, l1, a1, *w);
    EXPECT_EQ(std::memcmp(&m1, &m[size_t(i)], 4), 0) << i;
    EXPECT_EQ(std::memcmp(&l1, &l[size_t(i)], 4), 0) << i;
    EXPECT_EQ(std::memcmp(a1, &acc[size_t(i * kDim)], sizeof a1), 0) << i;
  }
}

// The tier's attention error against fp32 exact attention on outlier-like
// keys (channel outliers and a per-head offset), measured and printed beside
// the baseline without the K mean; bounded loosely (the reference's 0.192 on
// gaussian inputs at 217k is measured by h3s kvbench).
TEST(KvFp4s, AttentionErrorAgainstExactIsMeasured) {
  Rng r(24);
  const int64_t n = 512, nq = 32;
  std::vector<uint16_t> k = random_rows(r, n, 1.0f), v = random_rows(r, n, 1.0f),
                        q = random_rows(r, nq, 1.0f);
  float offset[kDim];
  for (float& o : offset) o = 2.0f * r.normal();
  for (int64_t t = 0; t < n; ++t)
    for (int d = 0; d < kDim; ++d) {
      uint16_t& b = k[size_t(t * kDim + d)];
      b = f32_to_bf16(bf16_to_f32(bf16{b}) + offset[d]).bits;
    }
  double err[2] = {0.0, 0.0}, ref = 0.0;
  auto scratch = std::make_unique<Scratch>();
  for (const bool centred : {true, false}) {
    const Tier t = make_tier(k, v, n, centred);
    for (int64_t i = 0; i < nq; ++i) {
      float qf[kDim], exact[kDim] = {}, acc[kDim] = {};
      uint16_t qr[kDim];
      for (int d = 0; d < kDim; ++d) qf[d] = bf16_to_f32(bf16{q[size_t(i * kDim + d)]});
      // Exact attention in fp32 on the unquantised rows (the query unrotated).
      std::vector<float> s(static_cast<size_t>(n));
      float mx = -INFINITY, sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        float kf[kDim];
        for (int d = 0; d < kDim; ++d) kf[d] = bf16_to_f32(bf16{k[size_t(j * kDim + d)]});
        s[size_t(j)] = dot_f32(qf, kf, kDim) / std::sqrt(float(kDim));
        mx = std::max(mx, s[size_t(j)]);
      }
      for (int64_t j = 0; j < n; ++j) {
        const float p = std::exp(s[size_t(j)] - mx);
        sum += p;
        for (int d = 0; d < kDim; ++d) exact[d] += p * bf16_to_f32(bf16{v[size_t(j * kDim + d)]});
      }
      kvi8r::rotate(qf);
      for (int d = 0; d < kDim; ++d) qr[d] = f32_to_bf16(qf[d]).bits;
      float m = -INFINITY, l = 0.0f;
      attend_row(qr, t.rows(), 0, n, m, l, acc, *scratch);
      for (int d = 0; d < kDim; ++d) {
        const double e = exact[d] / sum, a = acc[d] / l;
        err[centred ? 0 : 1] += (e - a) * (e - a);
        if (centred) ref += e * e;
      }
    }
  }
  const double tier = std::sqrt(err[0] / ref), baseline = std::sqrt(err[1] / ref);
  fmt::print("kvfp4s rel-rms vs exact (offset keys, {} keys): {:.4f}; without centring {:.4f}\n", n,
             tier, baseline);
  EXPECT_LT(tier, 0.5);
  EXPECT_LE(tier, baseline);
}

}  // namespace
}  // namespace h3s::test
