// The fused dequantising epilogue of the int8 GEMMs (gemm_i8 on mma.sync and
// wgmma, gemm_w4a8):
// y = bf16((float(acc) * xs[m]) * ws[n]) (+ bias[n]) from a CTA tile's exact
// int32 accumulators. One struct (DequantCols), so all three round identically.
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
// One column pair's weight scales and bias (zeros past n), and the
// dequantisation of a row's two accumulators in the golden order.
struct DequantCols {
  float ws0, ws1, b0, b1;
  bool has_bias;

  __device__ __forceinline__ static DequantCols at(int64_t col, int64_t n, const float* ws,
                                                   const float* bias) {
    DequantCols d{col < n ? ws[col] : 0.0f, col + 1 < n ? ws[col + 1] : 0.0f, 0.0f, 0.0f,
                  bias != nullptr};
    if (d.has_bias) {
      if (col < n) d.b0 = bias[col];
      if (col + 1 < n) d.b1 = bias[col + 1];
    }
    return d;
  }
  // y_row[col, col + 1] = bf16((float(a) * s) * ws) (+ bias), each inside n.
  __device__ __forceinline__ void store(uint16_t* y_row, int64_t col, int64_t n, int32_t a0,
                                        int32_t a1, float s) const {
    float v0 = __fmul_rn(__fmul_rn(__int2float_rn(a0), s), ws0);
    float v1 = __fmul_rn(__fmul_rn(__int2float_rn(a1), s), ws1);
    if (has_bias) {
      v0 = __fadd_rn(v0, b0);
      v1 = __fadd_rn(v1, b1);
    }
    store_bf16_pair(y_row, col, n, __bfloat16_as_ushort(__float2bfloat16_rn(v0)),
                    __bfloat16_as_ushort(__float2bfloat16_rn(v1)));
  }
};

// A CTA tile of the mma.sync layout.
__device__ __forceinline__ void store_dequantised(
    const int32_t (&acc)[MmaTileSm80::kFragsM][MmaTileSm80::kFragsN][4], TileCoord t, int64_t m,
    int64_t n, const float* xs, const float* ws, const float* bias, uint16_t* y, int64_t ldy) {
  using T = MmaTileSm80;
#pragma unroll
  for (int fn = 0; fn < T::kFragsN; ++fn) {
    const int64_t col = t.n0 + acc_pos(0, fn).col;
    const DequantCols dc = DequantCols::at(col, n, ws, bias);
#pragma unroll
    for (int fm = 0; fm < T::kFragsM; ++fm) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = t.m0 + acc_pos(fm, fn).row + 8 * half;
        if (row >= m) continue;
        dc.store(y + row * ldy, col, n, acc[fm][fn][2 * half], acc[fm][fn][2 * half + 1], xs[row]);
      }
    }
  }
}

}  // namespace h3s::cuda::gemm
