// Online-softmax state of the two query rows a lane holds in an mma.sync
// accumulator (rows g and g + 8 of the warp's m16 slab, g = lane / 4), and
// the per-tile update. The state means what the CPU reference's does
// (core/softmax_scale.hpp): m is the running max of the scores in log2 units,
// x * c with x = q.k and c = kScoreLog2Scale, l the running sum of
// 2^(x c - m); it is loaded from and stored to global fp32 unchanged, so
// chained calls continue the same arithmetic.
#pragma once

#include <cstdint>

#include "core/softmax_scale.hpp"

namespace h3s::cuda::attn {

inline constexpr float kInf = __builtin_huge_valf();

// What a tile's scores are: raw (x = q.k, the exact kernels': the scale c
// rides on the tile max's multiply and the exponent's fma) or already in log2
// units (kvi8s' definition folds c into its score's factors).
enum class ScoreUnits : uint8_t { raw, log2 };

// 2^x on the SFU. ftz: a probability below 2^-126 (of a row sum >= 1) is 0.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Reductions over the 4 lanes of a quad (the lanes holding one row's scores).
// Both steps combine commutative pairs, so all 4 lanes get the same bits.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// The max of v[0..kWidth) in halving steps: log2(kWidth) dependent fmaxf
// where a chain takes kWidth - 1. fmaxf's result does not depend on the
// order (NaN is dropped in any order; only the sign of a zero could differ,
// and 2^(+-0) is the same 1), so the tree changes no bits. One template per
// level keeps every level's array in registers: a rolled `w /= 2` loop put
// it in a 64-byte stack frame, 2.3x slower (H100, 2026-12-07).
template <int kWidth>
__device__ __forceinline__ float tree_max(const float (&v)[kWidth]) {
  static_assert(kWidth > 0 && (kWidth & (kWidth - 1)) == 0, "halving needs a power of two");
  if constexpr (kWidth == 1) {
    return v[0];
  } else {
    float half[kWidth / 2];
#pragma unroll
    for (int i = 0; i < kWidth / 2; ++i) half[i] = fmaxf(v[i], v[i + kWidth / 2]);
    return tree_max<kWidth / 2>(half);
  }
}

// alpha = 1 on both of every lane's rows: no row of the warp raised its max
// over the tile, so the accumulator's rescale (x * 1 == x in IEEE
// arithmetic, -0, denormals and infinities included; the build keeps
// denormals) may be skipped with no change of bits. A warp-wide vote, so the
// branch never diverges. Past the first few tiles of a long row most tiles
// keep the max. The Hopper exact consumer and kvi8s' fold use it; the
// mma.sync kernel does not (its vote cost 9% there, docs/PERFORMANCE.md).
__device__ __forceinline__ bool warp_keeps_max(const float (&alpha)[2]) {
  return __all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f);
}

struct OnlineSoftmax {
  static constexpr int kRows = 2;  // rows g and g + 8 of the m16 slab
  float m[kRows];
  float l[kRows];

  // Consume one key tile. s: the scores in the mma C layout (kUnits),
  // s[n][0..1] for row g and s[n][2..3] for row g + 8 (masked keys are
  // -inf). On return s holds the probabilities 2^(fma(x, c, -m_new)) and
  // alpha the factor by which the caller rescales its accumulator rows.
  // Every step is fixed per row: the row max and sum are reduced over the
  // whole tile, in the same order, and folded into (m, l) once per tile,
  // exactly as the single pass does.
  //
  // kLog2PScale > 0 (kvi8s: P stored as e4m3(p * 2^8)) returns s scaled by
  // 2^kLog2PScale (the shift folded into the exponent) while l still sums
  // the unscaled probabilities.
  //
  // The tile's max is a halving tree (tree_max: the same value in any
  // order). kChains > 1 takes the sum in that many independent chains,
  // combined at the end: fewer dependent steps, another order of the sum
  // and so other bits (the exact path keeps 1).
  template <int kBlocks, int kLog2PScale = 0, int kChains = 1, ScoreUnits kUnits = ScoreUnits::raw>
  __device__ __forceinline__ void consume(float (&s)[kBlocks][4], float (&alpha)[kRows]) {
    static_assert(kBlocks % kChains == 0, "the chains split the tile's blocks evenly");
    float thread_max[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float pair_max[kBlocks];
#pragma unroll
      for (int n = 0; n < kBlocks; ++n) pair_max[n] = fmaxf(s[n][2 * r], s[n][2 * r + 1]);
      thread_max[r] = tree_max(pair_max);
    }
    consume_with_max<kBlocks, kLog2PScale, kChains, true, kUnits>(s, thread_max, alpha);
  }

  // consume() given, per row, the max of this thread's scores (a caller that
  // knows it sooner: kvi8s takes it from the int32 dots).
  // kSum = false: l is left alone (a caller that sums the tile elsewhere and
  // folds it with fold_sum).
  template <int kBlocks, int kLog2PScale = 0, int kChains = 1, bool kSum = true,
            ScoreUnits kUnits = ScoreUnits::raw>
  __device__ __forceinline__ void consume_with_max(float (&s)[kBlocks][4],
                                                   const float (&thread_max)[kRows],
                                                   float (&alpha)[kRows]) {
    float shift[kRows];
    begin_tile<kLog2PScale, kSum, kUnits>(thread_max, alpha, shift);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float chain_sum[kChains] = {};
#pragma unroll
      for (int n = 0; n < kBlocks; ++n) {
        s[n][2 * r] = ex2(exponent<kUnits>(s[n][2 * r], shift[r]));
        s[n][2 * r + 1] = ex2(exponent<kUnits>(s[n][2 * r + 1], shift[r]));
        if constexpr (kSum) {
          chain_sum[n % kChains] = __fadd_rn(chain_sum[n % kChains], s[n][2 * r]);
          chain_sum[n % kChains] = __fadd_rn(chain_sum[n % kChains], s[n][2 * r + 1]);
        }
      }
      if constexpr (kSum) {
        float sum = chain_sum[0];
#pragma unroll
        for (int c = 1; c < kChains; ++c) sum = __fadd_rn(sum, chain_sum[c]);
        end_tile<kLog2PScale>(r, sum);
      }
    }
  }

  // The exponent of a score against the tile's shift (-m_new, or
  // kLog2PScale - m_new): fma(x, c, shift) for a raw score, one fma and no
  // separate scaling; x + shift (= fma(x, 1, shift)) for one in log2 units.
  template <ScoreUnits kUnits>
  __device__ __forceinline__ static float exponent(float x, float shift) {
    if constexpr (kUnits == ScoreUnits::raw)
      return __fmaf_rn(x, kScoreLog2Scale, shift);
    else
      return __fadd_rn(x, shift);
  }

  // The two ends of consume_with_max, for a caller that makes the
  // probabilities 2^(x + shift) itself (kvi8s folds the shift into its
  // score's fma). begin_tile: per row the new max, the accumulator's factor
  // alpha and the exponent's shift (kLog2PScale - m_new); l is scaled by
  // alpha now and the tile's sum added by end_tile. kScaleL = false: l is
  // left for fold_sum.
  template <int kLog2PScale = 0, bool kScaleL = true, ScoreUnits kUnits = ScoreUnits::raw>
  __device__ __forceinline__ void begin_tile(const float (&thread_max)[kRows],
                                             float (&alpha)[kRows], float (&shift)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      // The tile max in log2 units: c applied once to the raw max (rounding
      // is monotone, so it is the max of the rounded x c; -inf stays -inf).
      float tile_max = quad_max(thread_max[r]);
      if constexpr (kUnits == ScoreUnits::raw) tile_max = __fmul_rn(tile_max, kScoreLog2Scale);
      const float m_new = fmaxf(m[r], tile_max);
      // m_new is -inf only while every key so far is masked; base 0 then
      // keeps the exponent's argument at -inf (probability 0) instead of NaN.
      // An unchanged max gives alpha = 2^0 = 1, so no drift builds up.
      const float base = m_new == -kInf ? 0.0f : m_new;
      alpha[r] = ex2(__fsub_rn(m[r], base));  // fresh row (m = -inf): 0
      shift[r] = kLog2PScale == 0 ? -base : __fsub_rn(float(kLog2PScale), base);
      if constexpr (kScaleL) l[r] = __fmul_rn(l[r], alpha[r]);
      m[r] = m_new;
    }
  }
  // sum: this thread's probabilities of row r (scaled by 2^kLog2PScale).
  template <int kLog2PScale = 0>
  __device__ __forceinline__ void end_tile(int r, float sum) {
    const float tile_sum =
        kLog2PScale == 0 ? quad_sum(sum) : __fmul_rn(quad_sum(sum), 1.0f / float(1 << kLog2PScale));
    l[r] = __fadd_rn(l[r], tile_sum);
  }
  // A tile's row sum (of the whole row: the quad's already combined, scaled
  // by 2^kLog2PScale) folded in after the fact with the tile's alpha: the
  // steps of begin_tile and end_tile, for a caller whose sums arrive later.
  template <int kLog2PScale = 0>
  __device__ __forceinline__ void fold_sum(int r, float alpha, float row_sum) {
    l[r] = __fadd_rn(__fmul_rn(l[r], alpha), __fmul_rn(row_sum, 1.0f / float(1 << kLog2PScale)));
  }
};

}  // namespace h3s::cuda::attn
