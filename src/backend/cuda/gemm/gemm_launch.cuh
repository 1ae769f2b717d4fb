// Host side of the mma GEMM entry points: operand packing for the mainloop
// and the launch of an mma kernel with its dynamic shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/gemm/gemm_checks.hpp"
#include "backend/cuda/gemm/gemm_mainloop_sm80.cuh"
#include "backend/cuda/gemm/gemm_traits.cuh"

namespace h3s::cuda::gemm {

// cp.async needs every row start on a 16-byte boundary.
inline bool rows_aligned_16(const void* p, int64_t ld_bytes) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && ld_bytes % 16 == 0;
}

template <class Ops>
MmaOperandsArgs make_mma_args(const char* op, const typename Ops::Elem* x, int64_t ldx,
                              const typename Ops::Elem* w, int64_t m, int64_t n, int64_t k) {
  using T = MmaTileSm80;
  check_k_multiple(op, k, Ops::kKMultiple);
  MmaOperandsArgs p{};
  p.x = reinterpret_cast<const uint8_t*>(x);
  p.w = reinterpret_cast<const uint8_t*>(w);
  p.ldx_bytes = ldx * Ops::kElemBytes;
  p.ldw_bytes = k * Ops::kElemBytes;
  p.m = m;
  p.n = n;
  p.k_bytes = k * Ops::kElemBytes;
  p.tiles_m = (m + T::kBlockM - 1) / T::kBlockM;
  p.tiles_n = (n + T::kBlockN - 1) / T::kBlockN;
  p.x_aligned = rows_aligned_16(x, p.ldx_bytes);
  p.w_aligned = rows_aligned_16(w, p.ldw_bytes);
  // The 1-D grid holds at most 2^31 - 1 CTAs.
  check_grid(op, m, n, p.tiles_m, p.tiles_n, INT32_MAX / p.tiles_n, INT32_MAX, T::kBlockM,
             T::kBlockN);
  return p;
}

// One CTA per output tile, 1-D grid (tile_coord() maps it), with smem_bytes
// of dynamic shared memory; `params` is the kernel's first argument.
template <class Kernel, class Params, class... Args>
void launch_tiles(const char* op, Kernel kernel, int smem_bytes, int64_t tiles, cudaStream_t s,
                  const Params& params, Args... args) {
  using T = MmaTileSm80;
  // Per call rather than once: the attribute is per device, and it is cheap.
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
  if (e != cudaSuccess) fail_cuda(op, "reserving the GEMM's shared memory", cudaGetErrorString(e));
  const dim3 grid(static_cast<unsigned>(tiles));
  kernel<<<grid, T::kThreads, smem_bytes, s>>>(params, args...);
  check_launch(op);
}

// gemm_bf16's wgmma kernel (gemm_bf16_sm90.cu; sm_90 only).
void gemm_bf16_sm90(const MmaOperandsArgs& p, const float* bias, uint16_t* y, int64_t ldy,
                    cudaStream_t s);

// gemm_i8's wgmma kernel (gemm_i8_sm90.cu; sm_90 only).
void gemm_i8_sm90(const MmaOperandsArgs& p, const float* xs, const float* ws, const float* bias,
                  uint16_t* y, int64_t ldy, cudaStream_t s);

// The mma GEMMs that share mma_mainloop (gemm_bf16, gemm_i8).
template <class Kernel, class... Args>
void launch_mma_kernel(const char* op, Kernel kernel, const MmaOperandsArgs& p, cudaStream_t s,
                       Args... args) {
  launch_tiles(op, kernel, MmaTileSm80::kSmemBytes, p.tiles_m * p.tiles_n, s, p, args...);
}

}  // namespace h3s::cuda::gemm
