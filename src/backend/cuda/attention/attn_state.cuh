// Online-softmax state of the two query rows a lane holds in an mma.sync
// accumulator (rows g and g + 8 of the warp's m16 slab, g = lane / 4), and
// the per-tile update. The state means what the CPU reference's does: m is
// the running max of the scaled scores q.k / sqrt(d) (natural-log units), l
// the running sum of exp(s - m); it is loaded from and stored to global fp32
// unchanged, so chained calls continue the same arithmetic.
#pragma once

#include <cstdint>

namespace h3s::cuda::attn {

inline constexpr float kLog2e = 1.4426950408889634f;  // exp(x) = 2^(x * log2(e))
inline constexpr float kInf = __builtin_huge_valf();

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

struct OnlineSoftmax {
  static constexpr int kRows = 2;  // rows g and g + 8 of the m16 slab
  float m[kRows];
  float l[kRows];

  // Consume one key tile. s: scaled scores in the mma C layout, s[n][0..1]
  // for row g and s[n][2..3] for row g + 8 (masked keys are -inf). On return
  // s holds the probabilities exp(s - m_new) and alpha the factor by which
  // the caller rescales its accumulator rows. Every step is fixed per row:
  // the row max and sum are reduced over the whole tile, in the same order,
  // and folded into (m, l) once per tile, exactly as the single pass does.
  template <int kBlocks>
  __device__ __forceinline__ void consume(float (&s)[kBlocks][4], float (&alpha)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float tile_max = s[0][2 * r];
#pragma unroll
      for (int n = 0; n < kBlocks; ++n)
        tile_max = fmaxf(tile_max, fmaxf(s[n][2 * r], s[n][2 * r + 1]));
      const float m_new = fmaxf(m[r], quad_max(tile_max));
      // Exponents are taken against base = m_new * log2(e), rounded once:
      // exp(x - m_new) = 2^(x log2e - base) with one fma per score, and
      // alpha = 2^(base_old - base) uses the same rounded bases, so an
      // unchanged max gives alpha = 2^0 = 1 and no drift builds up over tiles.
      // m_new is -inf only while every key so far is masked; base 0 then keeps
      // (-inf) - base at -inf (probability 0) instead of NaN.
      const float base = m_new == -kInf ? 0.0f : __fmul_rn(m_new, kLog2e);
      alpha[r] = ex2(__fsub_rn(__fmul_rn(m[r], kLog2e), base));  // fresh row (m = -inf): 0
      float sum = 0.0f;
#pragma unroll
      for (int n = 0; n < kBlocks; ++n) {
        s[n][2 * r] = ex2(__fmaf_rn(s[n][2 * r], kLog2e, -base));
        s[n][2 * r + 1] = ex2(__fmaf_rn(s[n][2 * r + 1], kLog2e, -base));
        sum = __fadd_rn(sum, s[n][2 * r]);
        sum = __fadd_rn(sum, s[n][2 * r + 1]);
      }
      l[r] = __fadd_rn(__fmul_rn(l[r], alpha[r]), quad_sum(sum));
      m[r] = m_new;
    }
  }
};

}  // namespace h3s::cuda::attn
