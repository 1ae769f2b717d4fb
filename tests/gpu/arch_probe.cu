// The probe kernel of arch_probe.hpp: one warpgroup, one tile, every
// primitive the warp-specialised attention relies on.
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "arch_probe.hpp"
#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/tma.cuh"
#include "backend/cuda/arch/tma_desc.hpp"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/attention/attn_exp2_poly.hpp"

namespace h3s::test {
namespace {

constexpr uint32_t kABytes = kProbeM * 128, kBBytes = kProbeN * 128;  // 128-byte rows
constexpr size_t kSmem = kABytes + kBBytes + 8 + cuda::wgmma::kAtomBytes;

__global__ void __launch_bounds__(128)
    wgmma_tma_probe_kernel(const __grid_constant__ CUtensorMap a,
                           const __grid_constant__ CUtensorMap b, float* c) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  namespace arch = cuda::arch;
  namespace wg = cuda::wgmma;
  extern __shared__ __align__(1024) unsigned char raw[];
  const uint32_t base = (arch::smem_u32(raw) + wg::kAtomBytes - 1) & ~uint32_t(wg::kAtomBytes - 1);
  const uint32_t sa = base, sb = base + kABytes, bar = base + kABytes + kBBytes;
  if (threadIdx.x == 0) {
    arch::mbar_init(bar, 1);
    arch::mbar_fence_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    arch::mbar_arrive_expect_tx(bar, kABytes + kBBytes);
    arch::tma_load_3d(sa, &a, bar, 0, 0, 0);
    arch::tma_load_3d(sb, &b, bar, 0, 0, 0);
  }
  arch::mbar_wait(bar, 0);
  float d[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    d[i] = 0.0f;
    wg::fence_operand(d[i]);
  }
  wg::fence();
#pragma unroll
  for (int kk = 0; kk < kProbeK / 16; ++kk)
    wg::mma_m64n128k16_ss(d, wg::make_desc(sa + uint32_t(kk) * 32, 0, wg::kAtomBytes),
                          wg::make_desc(sb + uint32_t(kk) * 32, 0, wg::kAtomBytes), kk > 0);
  wg::commit();
  wg::wait<0>();
#pragma unroll
  for (int i = 0; i < 64; ++i) wg::fence_operand(d[i]);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int row = 16 * warp + lane / 4, col = 2 * (lane % 4);
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      c[(row + 8 * (i / 2)) * kProbeN + 8 * j + col + i % 2] = d[4 * j + i];
#else
  (void)a, (void)b, (void)c;
  __trap();
#endif
}

__global__ void exp2_poly_probe_kernel(const float* x, float* y, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = cuda::attn::exp2_poly(x[i]);
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

std::vector<float> wgmma_tma_probe(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  uint16_t *da = nullptr, *db = nullptr;
  float* dc = nullptr;
  check(cudaMalloc(&da, a.size() * 2), "probe alloc");
  check(cudaMalloc(&db, b.size() * 2), "probe alloc");
  check(cudaMalloc(&dc, size_t(kProbeM) * kProbeN * 4), "probe alloc");
  check(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice), "probe upload");
  check(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice), "probe upload");
  // Rank 3 like the attention's maps: (k, 1, rows), one 64-element box row.
  const uint32_t a_box[3] = {64, 1, kProbeM}, b_box[3] = {64, 1, kProbeN};
  const CUtensorMap am = cuda::arch::encode_bf16_swizzle128(
      {da, {uint64_t(kProbeK), 1, uint64_t(kProbeM)}, {128, 128}}, a_box, "probe a");
  const CUtensorMap bm = cuda::arch::encode_bf16_swizzle128(
      {db, {uint64_t(kProbeK), 1, uint64_t(kProbeN)}, {128, 128}}, b_box, "probe b");
  check(cudaFuncSetAttribute(wgmma_tma_probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(kSmem)),
        "probe smem");
  wgmma_tma_probe_kernel<<<1, 128, kSmem>>>(am, bm, dc);
  check(cudaGetLastError(), "probe launch");
  std::vector<float> c(size_t(kProbeM) * kProbeN);
  check(cudaMemcpy(c.data(), dc, c.size() * 4, cudaMemcpyDeviceToHost), "probe download");
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return c;
}

std::vector<float> exp2_poly_probe(const std::vector<float>& x) {
  const int n = int(x.size());
  float *dx = nullptr, *dy = nullptr;
  check(cudaMalloc(&dx, x.size() * 4), "probe alloc");
  check(cudaMalloc(&dy, x.size() * 4), "probe alloc");
  check(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), "probe upload");
  exp2_poly_probe_kernel<<<(n + 255) / 256, 256>>>(dx, dy, n);
  check(cudaGetLastError(), "probe launch");
  std::vector<float> y(x.size());
  check(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), "probe download");
  cudaFree(dx);
  cudaFree(dy);
  return y;
}

}  // namespace h3s::test
