// gemm_f32: y = x W^T (+ bias) in fp32 for the small fp32 islands (patch
// embeds, time embedder, output heads). Plain shared-memory tiled FFMA: every
// output is one fma chain over k = 0 .. K-1 in order, so its bits depend on
// its row and column only.
#include "backend/cuda/gemm/gemm_launch.cuh"
#include "backend/cuda/gemm/gemm_traits.cuh"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {

namespace gemm {
namespace {

using F = F32Tile;

// CTA (blockIdx.x, blockIdx.y) owns rows m0 .. m0+63 and columns n0 .. n0+63;
// thread (tm, tn) owns rows m0 + tm + 16 i and columns n0 + tn + 16 j, so a
// warp's shared reads are one broadcast (A) and 16 consecutive words (B).
__global__ void __launch_bounds__(F::kThreads)
    gemm_f32_m64n64k16(const float* x, int64_t ldx, const float* w, const float* bias, float* y,
                       int64_t ldy, int64_t m, int64_t n, int64_t k) {
  __shared__ float xs[F::kBlockK][F::kLdsM];
  __shared__ float wt[F::kBlockK][F::kLdsN];
  const int64_t m0 = int64_t(blockIdx.x) * F::kBlockM, n0 = int64_t(blockIdx.y) * F::kBlockN;
  const int tid = int(threadIdx.x);
  const int tm = tid / F::kThreadsN, tn = tid % F::kThreadsN;
  // Loader: element tid + i * kThreads of a [rows][kBlockK] tile, so a
  // thread's k column (tid % kBlockK) is the same for every i and 16
  // consecutive threads read 64 contiguous bytes of one row.
  const int lk = tid % F::kBlockK, lrow = tid / F::kBlockK;
  constexpr int kRowStep = F::kThreads / F::kBlockK;

  float acc[F::kThreadM][F::kThreadN];
#pragma unroll
  for (int i = 0; i < F::kThreadM; ++i)
#pragma unroll
    for (int j = 0; j < F::kThreadN; ++j) acc[i][j] = 0.0f;

  for (int64_t k0 = 0; k0 < k; k0 += F::kBlockK) {
    // Past K both operands are 0 and fma(0, 0, acc) == acc: the tail needs no
    // second loop. Past M / N the zeros feed outputs that are never stored.
    const int64_t kc = k0 + lk;
#pragma unroll
    for (int i = 0; i < F::kLoadsX; ++i) {
      const int r = lrow + i * kRowStep;
      xs[lk][r] = (kc < k && m0 + r < m) ? x[(m0 + r) * ldx + kc] : 0.0f;
    }
#pragma unroll
    for (int i = 0; i < F::kLoadsW; ++i) {
      const int r = lrow + i * kRowStep;
      wt[lk][r] = (kc < k && n0 + r < n) ? w[(n0 + r) * k + kc] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < F::kBlockK; ++c) {
      float a[F::kThreadM], b[F::kThreadN];
#pragma unroll
      for (int i = 0; i < F::kThreadM; ++i) a[i] = xs[c][tm + i * F::kThreadsM];
#pragma unroll
      for (int j = 0; j < F::kThreadN; ++j) b[j] = wt[c][tn + j * F::kThreadsN];
#pragma unroll
      for (int i = 0; i < F::kThreadM; ++i)
#pragma unroll
        for (int j = 0; j < F::kThreadN; ++j) acc[i][j] = __fmaf_rn(a[i], b[j], acc[i][j]);
    }
    __syncthreads();  // the tiles are overwritten next iteration
  }

#pragma unroll
  for (int i = 0; i < F::kThreadM; ++i) {
    const int64_t row = m0 + tm + i * F::kThreadsM;
    if (row >= m) continue;
#pragma unroll
    for (int j = 0; j < F::kThreadN; ++j) {
      const int64_t col = n0 + tn + j * F::kThreadsN;
      if (col >= n) continue;
      y[row * ldy + col] = bias != nullptr ? __fadd_rn(acc[i][j], bias[col]) : acc[i][j];
    }
  }
}

}  // namespace
}  // namespace gemm

void gemm_f32(const float* x, int64_t ldx, const float* w, const float* bias, float* y, int64_t ldy,
              int64_t m, int64_t n, int64_t k, cudaStream_t s) {
  using F = gemm::F32Tile;
  constexpr const char* op = "gemm_f32";
  if (!gemm::check_gemm_shape(op, m, n, k, ldx, ldy)) return;
  const int64_t tiles_m = (m + F::kBlockM - 1) / F::kBlockM;
  const int64_t tiles_n = (n + F::kBlockN - 1) / F::kBlockN;
  gemm::check_grid(op, m, n, tiles_m, tiles_n, INT32_MAX, 65535, F::kBlockM, F::kBlockN);
  const dim3 grid(static_cast<unsigned>(tiles_m), static_cast<unsigned>(tiles_n));
  gemm::gemm_f32_m64n64k16<<<grid, F::kThreads, 0, s>>>(x, ldx, w, bias, y, ldy, m, n, k);
  check_launch(op);
}

}  // namespace h3s::cuda
