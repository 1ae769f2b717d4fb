// Argument checks of the GEMM entry points, in plain C++ (gemm_checks.cpp):
// nvcc cannot compile fmt's compile-time format strings, so every message is
// formatted on the host compiler's side. Each throws h3s::Error naming the bad
// value and the fix.
#pragma once

#include <cstdint>

#include "backend/cuda/kernel_choice.hpp"

namespace h3s::cuda::gemm {

// Shapes and strides every GEMM needs; false when there is nothing to compute.
bool check_gemm_shape(const char* op, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy);
// k must be a whole number of mma K slices.
void check_k_multiple(const char* op, int64_t k, int64_t multiple);
// The grid of tiles_m x tiles_n CTA tiles must fit one launch.
void check_grid(const char* op, int64_t m, int64_t n, int64_t tiles_m, int64_t tiles_n,
                int64_t max_x, int64_t max_y, int block_m, int block_n);
[[noreturn]] void fail_cuda(const char* op, const char* what, const char* cuda_error);

// gemm_w4a8's pipeline (kernel_choice.hpp's choose_w4a8) for `want` where a
// block may take `smem_limit` bytes of shared memory (99 KiB on sm_86/sm_89
// cards), smem3 / smem2 bytes for three / two stages; throws naming the need
// when not even two fit.
Kernel gemm_w4a8_choice(const char* op, GemmKernel want, int smem_limit, int smem3, int smem2);

}  // namespace h3s::cuda::gemm
