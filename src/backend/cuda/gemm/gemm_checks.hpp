// Argument checks and kernel choices of the GEMM entry points, in plain C++ (gemm_checks.cpp):
// nvcc cannot compile fmt's compile-time format strings, so every message is
// formatted on the host compiler's side. Each throws h3s::Error naming the bad
// value and the fix.
#pragma once

#include <cstdint>

namespace h3s::cuda::gemm {

// Shapes and strides every GEMM needs; false when there is nothing to compute.
bool check_gemm_shape(const char* op, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy);
// k must be a whole number of mma K slices.
void check_k_multiple(const char* op, int64_t k, int64_t multiple);
// The grid of tiles_m x tiles_n CTA tiles must fit one launch.
void check_grid(const char* op, int64_t m, int64_t n, int64_t tiles_m, int64_t tiles_n,
                int64_t max_x, int64_t max_y, int block_m, int block_n);
[[noreturn]] void fail_cuda(const char* op, const char* what, const char* cuda_error);

// gemm_i8's kernel on sm_90: H3S_GEMM_I8_KERNEL (or H3S_GEMM_KERNEL=sm80, which
// moves every GEMM to mma.sync) names one of `names` or sm80; unset: names[0].
// Returns its index, or -1 for sm80. Re-read per call: benchmarks switch
// kernels between measurements in one process.
int gemm_i8_sm90_choice(const char* const* names, int count);

// gemm_w4a8's pipeline depth: the deepest of 3, 2 stages whose shared memory
// (smem3, smem2 bytes) a block may take on this device (`smem_limit`; 99 KiB
// on sm_86/sm_89 cards); H3S_GEMM_W4A8_STAGES=2 or 3 asks for one (re-read
// per call: tests compare their bits).
int gemm_w4a8_stages(const char* op, int smem_limit, int smem3, int smem2);

}  // namespace h3s::cuda::gemm
