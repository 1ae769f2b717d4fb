// gemm_i8: int8 x int8 -> exact int32 with s8 tensor-core MMAs (mma.sync
// m16n8k32), the shared mma mainloop, and the fused dequantising epilogue
// y = bf16((float(acc) * xs[m]) * ws[n]) (+ bias[n]).
#include <cuda_bf16.h>

#include "backend/cuda/gemm/gemm_launch.cuh"
#include "backend/cuda/gemm/gemm_mainloop_sm80.cuh"
#include "backend/cuda/gemm/gemm_traits.cuh"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {

namespace gemm {
namespace {

using T = MmaTileSm80;

// The int32 sums are exact, so only the epilogue can differ from the CPU
// reference and from comfy-kitchen's CUTLASS kernel: the products are spelled
// with __fmul_rn / __fadd_rn (never contracted into an fma, whatever the
// flags) in exactly the golden order, (acc * xs) * ws, then + bias, then one
// RNE rounding to bf16. acc * (xs * ws) differs (tests/data/golden/README.md).
__global__ void __launch_bounds__(T::kThreads, T::kMinCtasPerSm)
    gemm_i8_m128n128k128_sm80(MmaOperandsArgs p, const float* xs, const float* ws,
                              const float* bias, uint16_t* y, int64_t ldy) {
  extern __shared__ __align__(128) uint8_t smem[];
  const TileCoord t = tile_coord(blockIdx.x, p.tiles_m, p.tiles_n);
  int32_t acc[T::kFragsM][T::kFragsN][4];
  mma_mainloop<S8Operands>(p, t, smem, acc);

#pragma unroll
  for (int fn = 0; fn < T::kFragsN; ++fn) {
    const int64_t col = t.n0 + acc_pos(0, fn).col;
    const float ws0 = col < p.n ? ws[col] : 0.0f, ws1 = col + 1 < p.n ? ws[col + 1] : 0.0f;
    float b0 = 0.0f, b1 = 0.0f;
    if (bias != nullptr) {
      if (col < p.n) b0 = bias[col];
      if (col + 1 < p.n) b1 = bias[col + 1];
    }
#pragma unroll
    for (int fm = 0; fm < T::kFragsM; ++fm) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int64_t row = t.m0 + acc_pos(fm, fn).row + 8 * half;
        if (row >= p.m) continue;
        const float s = xs[row];
        float v0 = __fmul_rn(__fmul_rn(__int2float_rn(acc[fm][fn][2 * half]), s), ws0);
        float v1 = __fmul_rn(__fmul_rn(__int2float_rn(acc[fm][fn][2 * half + 1]), s), ws1);
        if (bias != nullptr) {
          v0 = __fadd_rn(v0, b0);
          v1 = __fadd_rn(v1, b1);
        }
        store_bf16_pair(y + row * ldy, col, p.n, __bfloat16_as_ushort(__float2bfloat16_rn(v0)),
                        __bfloat16_as_ushort(__float2bfloat16_rn(v1)));
      }
    }
  }
}

}  // namespace
}  // namespace gemm

void gemm_i8(const int8_t* xq, int64_t ldx, const float* xs, const int8_t* w, const float* ws,
             const float* bias, uint16_t* y, int64_t ldy, int64_t m, int64_t n, int64_t k,
             cudaStream_t s) {
  constexpr const char* op = "gemm_i8";
  if (!gemm::check_gemm_shape(op, m, n, k, ldx, ldy)) return;
  const gemm::MmaOperandsArgs p = gemm::make_mma_args<gemm::S8Operands>(op, xq, ldx, w, m, n, k);
  gemm::launch_mma_kernel(op, gemm::gemm_i8_m128n128k128_sm80, p, s, xs, ws, bias, y, ldy);
}

}  // namespace h3s::cuda
