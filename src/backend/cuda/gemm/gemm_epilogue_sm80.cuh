// The fused dequantising epilogue of the int8 GEMMs (gemm_i8, gemm_w4a8):
// y = bf16((float(acc) * xs[m]) * ws[n]) (+ bias[n]) from a CTA tile's exact
// int32 accumulators. One function, so both GEMMs round identically.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/gemm/gemm_mainloop_sm80.cuh"
#include "backend/cuda/gemm/gemm_traits.cuh"

namespace h3s::cuda::gemm {

// The int32 sums are exact, so only the epilogue can differ from the CPU
// reference and from comfy-kitchen's CUTLASS kernel: the products are spelled
// with __fmul_rn / __fadd_rn (never contracted into an fma, whatever the
// flags) in exactly the golden order, (acc * xs) * ws, then + bias, then one
// RNE rounding to bf16. acc * (xs * ws) differs (tests/data/golden/README.md).
__device__ __forceinline__ void store_dequantised(
    const int32_t (&acc)[MmaTileSm80::kFragsM][MmaTileSm80::kFragsN][4], TileCoord t, int64_t m,
    int64_t n, const float* xs, const float* ws, const float* bias, uint16_t* y, int64_t ldy) {
  using T = MmaTileSm80;
#pragma unroll
  for (int fn = 0; fn < T::kFragsN; ++fn) {
    const int64_t col = t.n0 + acc_pos(0, fn).col;
    const float ws0 = col < n ? ws[col] : 0.0f, ws1 = col + 1 < n ? ws[col + 1] : 0.0f;
    float b0 = 0.0f, b1 = 0.0f;
    if (bias != nullptr) {
      if (col < n) b0 = bias[col];
      if (col + 1 < n) b1 = bias[col + 1];
    }
#pragma unroll
    for (int fm = 0; fm < T::kFragsM; ++fm) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = t.m0 + acc_pos(fm, fn).row + 8 * half;
        if (row >= m) continue;
        const float s = xs[row];
        float v0 = __fmul_rn(__fmul_rn(__int2float_rn(acc[fm][fn][2 * half]), s), ws0);
        float v1 = __fmul_rn(__fmul_rn(__int2float_rn(acc[fm][fn][2 * half + 1]), s), ws1);
        if (bias != nullptr) {
          v0 = __fadd_rn(v0, b0);
          v1 = __fadd_rn(v1, b1);
        }
        store_bf16_pair(y + row * ldy, col, n, __bfloat16_as_ushort(__float2bfloat16_rn(v0)),
                        __bfloat16_as_ushort(__float2bfloat16_rn(v1)));
      }
    }
  }
}

}  // namespace h3s::cuda::gemm
