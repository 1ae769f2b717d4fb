// The kvi8s tier's quantiser on the GPU, bit-exact with
// kvi8s::quantise_tile (kv/kvi8s.hpp, which the CPU backend runs): one CTA
// per (tile, head). Warps 0 and 1 take the tile's two 64-token K blocks
// (rotate each row with the warp Hadamard, the mean in token order, its
// fixed-point digits, then the residual's codes: three passes over the
// rows, rotating again rather than keeping them); warps 2 and 3 take V's
// 128 channels (amax, scale, e4m3 codes written in v_position order).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kv/kv_row_parts.cuh"
#include "backend/cuda/kv/warp_hadamard.cuh"
#include "kv/kvi8s.hpp"

namespace h3s::cuda {
namespace {

using kv::kPerLane;
constexpr int kThreads = 128;
constexpr int kTile = int(kvi8s::kTile);
constexpr int kBlock = int(kvi8s::kBlock);
constexpr float kHeadroom = 1.0f + 0x1p-7f;

// The call's row i (bf16 bits) of head h: the kept tail's rows first.
using Rows = KvRowPartsView<kvi8s::kDim>;

__device__ __forceinline__ bool usable(float scale) {
  return scale > 0.0f && isfinite(scale);
}
// kvi8s' scale_of and code_of, step for step.
__device__ __forceinline__ float scale_of(float amax, float limit) {
  return __fmul_rn(__fdiv_rn(amax, limit), kHeadroom);
}
__device__ __forceinline__ int code_of(float x, float scale, int limit) {
  if (!usable(scale)) return 0;
  const float c = rintf(__fdiv_rn(x, scale));
  return fabsf(c) <= float(limit) ? int(c) : 0;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ uint8_t e4m3(float x) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  return uint8_t(r & 0xffu);
}

// One K block of the tile: rows [row0, row0 + n) of the call, head h.
__device__ void quantise_k_block(const Rows& rows, int64_t row0, int n, int64_t h, int b, int lane,
                                 int8_t* code, int64_t code_stride, uint8_t* header) {
  auto* hi = reinterpret_cast<int8_t*>(header + (2 * b) * kvi8s::kDim) + kPerLane * lane;
  auto* lo = reinterpret_cast<int8_t*>(header + (2 * b + 1) * kvi8s::kDim) + kPerLane * lane;
  auto* scales = reinterpret_cast<float*>(header + kvi8s::kRowScales * kvi8s::kDim);
  if (n <= 0) {  // the sequence ended in the tile's first block
    *reinterpret_cast<uint32_t*>(hi) = 0;
    *reinterpret_cast<uint32_t*>(lo) = 0;
    if (lane == 0) scales[b] = scales[kvi8s::kBlocksPerTile + b] = 0.0f;
    return;
  }
  float x[kPerLane], sum[kPerLane] = {};
  for (int t = 0; t < n; ++t) {
    kv::load_bf16x4(rows.k(row0 + t, h) + kPerLane * lane, x);
    kv::rotate128(x, lane);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) sum[j] = __fadd_rn(sum[j], x[j]);
  }
  float mu[kPerLane], mean_amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    mu[j] = __fdiv_rn(sum[j], float(n));
    mean_amax = fmaxf(mean_amax, fabsf(mu[j]));
  }
  const float m_scale = scale_of(warp_max(mean_amax), float(kvi8s::kMeanMax));
  float mean[kPerLane];
  uint32_t hi_w = 0, lo_w = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int m16 = code_of(mu[j], m_scale, kvi8s::kMeanMax);
    const int h8 = (m16 + 128) >> 8, l8 = m16 - 256 * h8;
    hi_w |= (uint32_t(h8) & 0xffu) << (8 * j);
    lo_w |= (uint32_t(l8) & 0xffu) << (8 * j);
    mean[j] = usable(m_scale) ? __fmul_rn(float(m16), m_scale) : 0.0f;
  }
  *reinterpret_cast<uint32_t*>(hi) = hi_w;
  *reinterpret_cast<uint32_t*>(lo) = lo_w;
  float amax = 0.0f;
  for (int t = 0; t < n; ++t) {
    kv::load_bf16x4(rows.k(row0 + t, h) + kPerLane * lane, x);
    kv::rotate128(x, lane);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) amax = fmaxf(amax, fabsf(__fsub_rn(x[j], mean[j])));
  }
  const float scale = scale_of(warp_max(amax), float(kvi8s::kMaxCode));
  for (int t = 0; t < n; ++t) {
    kv::load_bf16x4(rows.k(row0 + t, h) + kPerLane * lane, x);
    kv::rotate128(x, lane);
    uint32_t w = 0;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      w |= (uint32_t(code_of(__fsub_rn(x[j], mean[j]), scale, kvi8s::kMaxCode)) & 0xffu) << (8 * j);
    *reinterpret_cast<uint32_t*>(code + (row0 + t) * code_stride + kPerLane * lane) = w;
  }
  if (lane == 0) {
    scales[b] = scale;
    scales[kvi8s::kBlocksPerTile + b] = usable(m_scale) ? m_scale : 0.0f;
  }
}

// One V channel d of the tile: its scale into the header, its codes (zero
// past n) into its transposed row in v_position order.
__device__ void quantise_v_channel(const Rows& rows, int64_t row0, int n, int64_t h, int d,
                                   uint8_t* v_row, uint8_t* header) {
  float amax = 0.0f;
  for (int t = 0; t < n; ++t)
    amax = fmaxf(amax, fabsf(__uint_as_float(uint32_t(rows.v(row0 + t, h)[d]) << 16)));
  const float s = scale_of(amax, kvi8s::kE4m3Max);
  reinterpret_cast<float*>(header + kvi8s::kRowVScale * kvi8s::kDim)[d] =
      usable(s) ? __fmul_rn(s, kvi8s::kInvPScale) : 0.0f;
  for (int p0 = 0; p0 < kTile; p0 += 4) {
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // The key at position p: v_position's inverse within its 16-key half.
      const int p = p0 + i, t = (p & ~15) + 2 * ((p & 15) >> 2) + (i & 1) + 8 * (i >> 1);
      const float v = __uint_as_float(uint32_t(t < n ? rows.v(row0 + t, h)[d] : 0) << 16);
      const uint8_t c = (t < n && usable(s)) ? e4m3(__fdiv_rn(v, s)) : uint8_t(0);
      w |= uint32_t(c) << (8 * i);
    }
    *reinterpret_cast<uint32_t*>(v_row + p0) = w;
  }
}

__global__ void __launch_bounds__(kThreads)
    kvi8s_quantize_kernel(Rows rows, int64_t n_rows, int64_t first_row, int64_t heads,
                          int8_t* k_code, int64_t code_stride, uint8_t* v_code, int64_t v_stride,
                          uint8_t* header) {
  const int64_t tile_row = int64_t(blockIdx.x) * kTile, h = blockIdx.y;
  const int n = int(n_rows - tile_row < kTile ? n_rows - tile_row : kTile);
  const int64_t tile = (first_row + tile_row) / kTile;
  uint8_t* record = header + (tile * heads + h) * kvi8s::kHeaderBytes;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  if (warp < kvi8s::kBlocksPerTile) {
    const int b = warp, nb = n - b * kBlock < kBlock ? n - b * kBlock : kBlock;
    quantise_k_block(rows, tile_row + b * kBlock, nb, h, b, lane,
                     k_code + first_row * code_stride + h * kvi8s::kDim, code_stride, record);
    if (warp == 0)  // the scales row past its four floats
      reinterpret_cast<float*>(record + kvi8s::kRowScales * kvi8s::kDim)[4 + lane % 28] = 0.0f;
  } else {
    const int v_thread = int(threadIdx.x) - kvi8s::kBlocksPerTile * 32;
    for (int d = v_thread; d < kvi8s::kDim; d += kThreads - kvi8s::kBlocksPerTile * 32)
      quantise_v_channel(rows, tile_row, n, h, d,
                         v_code + (h * kvi8s::kDim + d) * v_stride + first_row + tile_row, record);
  }
}

}  // namespace

void kvi8s_quantize(const KvRowParts& in, int64_t first_row, int64_t heads, int8_t* k_code,
                    int64_t code_stride, uint8_t* v_code, int64_t v_stride, uint8_t* header,
                    cudaStream_t s) {
  const int64_t n = in.rows[0] + in.rows[1];
  if (n <= 0 || heads <= 0) return;
  const dim3 grid(unsigned((n + kTile - 1) / kTile), unsigned(heads));
  kvi8s_quantize_kernel<<<grid, kThreads, 0, s>>>(Rows{in}, n, first_row, heads, k_code,
                                                  code_stride, v_code, v_stride, header);
  check_launch("kvi8s_quantize");
}

}  // namespace h3s::cuda
