// fill_mod_rows (mod_rows.hpp): one thread per row scans the batch's runs.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/elementwise/mod_rows.hpp"

namespace h3s::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    fill_mod_rows_kernel(int32_t* mod_row, int64_t m, ModRunBatch batch, bool clear) {
  const int64_t r = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (r >= m) return;
  int32_t v = -1;
  bool hit = false;
  for (int i = 0; i < batch.count; ++i) {
    if (r >= batch.begin[i] && r < batch.end[i]) {
      v = batch.mod_row[i];
      hit = true;
    }
  }
  if (hit || clear) mod_row[r] = v;
}

}  // namespace

void fill_mod_rows(int32_t* mod_row, int64_t m, const ModRunBatch& batch, bool clear,
                   cudaStream_t s) {
  if (m <= 0) return;
  const int64_t blocks = (m + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) fail_internal("fill_mod_rows: too many rows in one call");
  fill_mod_rows_kernel<<<unsigned(blocks), kThreads, 0, s>>>(mod_row, m, batch, clear);
  check_launch("fill_mod_rows");
}

}  // namespace h3s::cuda
