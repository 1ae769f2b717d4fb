// Argument checks of the GEMM entry points (see gemm_checks.hpp).
#include "backend/cuda/gemm/gemm_checks.hpp"

#include "core/error.hpp"

namespace h3s::cuda::gemm {

bool check_gemm_shape(const char* op, int64_t m, int64_t n, int64_t k, int64_t ldx, int64_t ldy) {
  if (m < 0 || n < 0 || k < 0)
    fail(ErrorKind::invalid_argument, "{}: negative shape m = {}, n = {}, k = {}", op, m, n, k);
  if (ldx < k)
    fail(ErrorKind::invalid_argument, "{}: x row stride {} is shorter than a row of k = {}", op,
         ldx, k);
  if (ldy < n)
    fail(ErrorKind::invalid_argument, "{}: y row stride {} is shorter than a row of n = {}", op,
         ldy, n);
  return m > 0 && n > 0;
}

void check_k_multiple(const char* op, int64_t k, int64_t multiple) {
  if (k % multiple != 0)
    fail(ErrorKind::invalid_argument,
         "{}: k = {} must be a multiple of {} (whole mma K slices); pad the input features", op, k,
         multiple);
}

void check_grid(const char* op, int64_t m, int64_t n, int64_t tiles_m, int64_t tiles_n,
                int64_t max_x, int64_t max_y, int block_m, int block_n) {
  if (tiles_m > max_x || tiles_n > max_y)
    fail(ErrorKind::invalid_argument,
         "{}: {} x {} outputs need {} x {} tiles of {} x {}, more than one launch holds; split "
         "the rows into chunks",
         op, m, n, tiles_m, tiles_n, block_m, block_n);
}

void fail_cuda(const char* op, const char* what, const char* cuda_error) {
  fail(ErrorKind::internal, "{}: {} failed: {}", op, what, cuda_error);
}

Kernel gemm_w4a8_choice(const char* op, GemmKernel want, int smem_limit, int smem3, int smem2) {
  const Kernel k = choose_w4a8(want, smem_limit, smem3, smem2);
  if (k != Kernel::none) return k;
  fail(ErrorKind::invalid_argument,
       "{}: a block may take {} bytes of shared memory on this GPU; the W4A8 GEMM needs {}", op,
       smem_limit, smem2);
}

}  // namespace h3s::cuda::gemm
