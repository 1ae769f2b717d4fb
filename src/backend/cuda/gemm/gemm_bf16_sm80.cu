// gemm_bf16: y = bf16(x W^T + bias) with bf16 tensor-core MMAs (mma.sync
// m16n8k16, fp32 accumulate), the shared mma mainloop and a direct
// register -> global epilogue; and the entry point, which runs the wgmma
// kernel (gemm_bf16_sm90.cu) on Hopper (kernel_choice.hpp). One kernel per
// device and request, never per call shape; GemmKernel::sm80 runs this one
// there too (comparison runs).
#include <cuda_bf16.h>

#include "backend/cuda/gemm/gemm_launch.cuh"
#include "backend/cuda/gemm/gemm_mainloop_sm80.cuh"
#include "backend/cuda/gemm/gemm_traits.cuh"
#include "backend/cuda/kernel_choice.hpp"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {

namespace gemm {
namespace {

using T = MmaTileSm80;

// Epilogue order (the CPU reference's): the fp32 dot, + bias in fp32, then
// one RNE rounding to bf16. Without a bias nothing is added (adding +0 would
// turn a -0 dot into +0).
__global__ void __launch_bounds__(T::kThreads, T::kMinCtasPerSm)
    gemm_bf16_m128n128k64_sm80(MmaOperandsArgs p, const float* bias, uint16_t* y, int64_t ldy) {
  extern __shared__ __align__(128) uint8_t smem[];
  const TileCoord t = tile_coord(blockIdx.x, p.tiles_m, p.tiles_n);
  float acc[T::kFragsM][T::kFragsN][4];
  mma_mainloop<Bf16Operands>(p, t, smem, acc);

#pragma unroll
  for (int fn = 0; fn < T::kFragsN; ++fn) {
    const int64_t col = t.n0 + acc_pos(0, fn).col;
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
        float v0 = acc[fm][fn][2 * half], v1 = acc[fm][fn][2 * half + 1];
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

void gemm_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, const float* bias, uint16_t* y,
               int64_t ldy, int64_t m, int64_t n, int64_t k, GemmKernel want, cudaStream_t s) {
  constexpr const char* op = "gemm_bf16";
  if (!gemm::check_gemm_shape(op, m, n, k, ldx, ldy)) return;
  const gemm::MmaOperandsArgs p = gemm::make_mma_args<gemm::Bf16Operands>(op, x, ldx, w, m, n, k);
  if (choose(Op::gemm_bf16, kernel_arch(), want) == Kernel::gemm_bf16_sm90)
    return gemm::gemm_bf16_sm90(p, bias, y, ldy, s);
  gemm::launch_mma_kernel(op, gemm::gemm_bf16_m128n128k64_sm80, p, s, bias, y, ldy);
}

}  // namespace h3s::cuda
