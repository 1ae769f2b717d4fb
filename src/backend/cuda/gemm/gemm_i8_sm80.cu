// gemm_i8: int8 x int8 -> exact int32 with s8 tensor-core MMAs (mma.sync
// m16n8k32), the shared mma mainloop, and the fused dequantising epilogue
// y = bf16((float(acc) * xs[m]) * ws[n]) (+ bias[n]). On Hopper gemm_i8
// runs the wgmma kernel of gemm_i8_sm90.cu (the same bits) instead
// (kernel_choice.hpp).
#include "backend/cuda/gemm/gemm_epilogue_sm80.cuh"
#include "backend/cuda/gemm/gemm_launch.cuh"
#include "backend/cuda/gemm/gemm_mainloop_sm80.cuh"
#include "backend/cuda/gemm/gemm_traits.cuh"
#include "backend/cuda/kernel_choice.hpp"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {

namespace gemm {
namespace {

using T = MmaTileSm80;

// The epilogue (store_dequantised) is shared with gemm_w4a8, so the two
// round identically.
__global__ void __launch_bounds__(T::kThreads, T::kMinCtasPerSm)
    gemm_i8_m128n128k128_sm80(MmaOperandsArgs p, const float* xs, const float* ws,
                              const float* bias, uint16_t* y, int64_t ldy) {
  extern __shared__ __align__(128) uint8_t smem[];
  const TileCoord t = tile_coord(blockIdx.x, p.tiles_m, p.tiles_n);
  int32_t acc[T::kFragsM][T::kFragsN][4];
  mma_mainloop<S8Operands>(p, t, smem, acc);
  store_dequantised(acc, t, p.m, p.n, xs, ws, bias, y, ldy);
}

}  // namespace
}  // namespace gemm

void gemm_i8(const int8_t* xq, int64_t ldx, const float* xs, const int8_t* w, const float* ws,
             const float* bias, uint16_t* y, int64_t ldy, int64_t m, int64_t n, int64_t k,
             GemmKernel want, cudaStream_t s) {
  constexpr const char* op = "gemm_i8";
  if (!gemm::check_gemm_shape(op, m, n, k, ldx, ldy)) return;
  const gemm::MmaOperandsArgs p = gemm::make_mma_args<gemm::S8Operands>(op, xq, ldx, w, m, n, k);
  if (choose(Op::gemm_i8, kernel_arch(), want) == Kernel::gemm_i8_sm90)
    return gemm::gemm_i8_sm90(p, xs, ws, bias, y, ldy, s);
  gemm::launch_mma_kernel(op, gemm::gemm_i8_m128n128k128_sm80, p, s, xs, ws, bias, y, ldy);
}

}  // namespace h3s::cuda
