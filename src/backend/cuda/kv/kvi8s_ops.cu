// The kvi8s tier's quantiser on the GPU, bit-exact with
// kvi8s::quantise_tile (kvfmt/kvi8s.hpp, which the CPU backend runs): one CTA
// per (tile, head), in three steps over shared memory.
//   1. Each warp rotates rows of the tile's K with the warp Hadamard (kept as
//      fp32) and stages the same rows of V (bf16): coalesced row reads, each
//      row rotated once.
//   2. K, thread (block b, dim j): the block's mean in token order, its
//      fixed-point digits (the scale from the block's four warps' max), then
//      the residual's scale and codes; a warp writes 32 consecutive bytes of
//      a code row.
//   3. V, thread (half, channel d): the channel's amax over its half of the
//      tile, the two halves' max, then the e4m3 codes of its half in
//      v_position order.
// (The first kernel made three passes over global memory per K block, each
// rotating every row again, in two warps: ~1 ms per 16k-row chunk, 6x its
// memory time; docs/PERFORMANCE.md.)
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/arch/smem_limits.hpp"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kv/kv_row_parts.cuh"
#include "backend/cuda/kv/warp_hadamard.cuh"
#include "backend/cuda/quant/e4m3.cuh"
#include "kvfmt/kvi8s.hpp"

namespace h3s::cuda {
namespace {

using kv::kPerLane;
constexpr int kTile = int(kvi8s::kTile);
constexpr int kBlock = int(kvi8s::kBlock);
constexpr int kDim = kvi8s::kDim;
constexpr int kBlocks = kvi8s::kBlocksPerTile;
constexpr int kThreads = kBlocks * kDim;  // 256: one thread per (K block, dim)
constexpr int kWarps = kThreads / 32;
constexpr int kWarpsPerBlock = kDim / 32;  // a K block's threads: 4 whole warps
constexpr int kVHalves = kThreads / kDim;  // V: threads per channel
constexpr float kHeadroom = 1.0f + 0x1p-7f;
static_assert(kTile % kVHalves == 0 && (kTile / kVHalves) % 16 == 0,
              "a V half is whole 16-key groups of v_position");

// The tile in shared memory: K rotated (fp32), V as read (bf16), and the
// cross-warp reductions.
struct TileSmem {
  float k[kTile][kDim];
  uint16_t v[kTile][kDim];
  float warp_max[kWarps];
  float v_amax[kVHalves][kDim];
};
constexpr int kSmemBytes = int(sizeof(TileSmem));  // 99,360 bytes
// The quantiser runs where the kvi8s store does: sm_89/120 (RTX 40/50 cards) and Hopper.
static_assert(kSmemBytes <= arch::kSmemOptInSm86,
              "exceeds the shared memory a block may take on sm_89/120");

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

// The max of v over the kWarpsPerBlock warps of K block b (every thread of
// the CTA calls it: it synchronises).
__device__ float block_max(TileSmem& sm, float v, int b) {
  v = warp_max(v);
  __syncthreads();  // warp_max[] is free (its last readers are past)
  if (threadIdx.x % 32 == 0) sm.warp_max[threadIdx.x / 32] = v;
  __syncthreads();
  float m = sm.warp_max[b * kWarpsPerBlock];
#pragma unroll
  for (int w = 1; w < kWarpsPerBlock; ++w) m = fmaxf(m, sm.warp_max[b * kWarpsPerBlock + w]);
  return m;
}

__global__ void __launch_bounds__(kThreads)
    kvi8s_quantize_kernel(Rows rows, int64_t n_rows, int64_t first_row, int64_t heads,
                          int8_t* k_code, int64_t code_stride, uint8_t* v_code, int64_t v_stride,
                          uint8_t* header) {
  extern __shared__ float4 smem_raw[];
  TileSmem& sm = *reinterpret_cast<TileSmem*>(smem_raw);
  const int64_t tile_row = int64_t(blockIdx.x) * kTile, h = blockIdx.y;
  const int n = int(n_rows - tile_row < kTile ? n_rows - tile_row : kTile);
  const int64_t tile = (first_row + tile_row) / kTile;
  uint8_t* record = header + (tile * heads + h) * kvi8s::kHeaderBytes;
  auto* scales = reinterpret_cast<float*>(record + kvi8s::kRowScales * kDim);
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;

  // 1. K rotated, V staged.
  for (int t = warp; t < n; t += kWarps) {
    float x[kPerLane];
    kv::load_bf16x4(rows.k(tile_row + t, h) + kPerLane * lane, x);
    kv::rotate128(x, lane);
    *reinterpret_cast<float4*>(&sm.k[t][kPerLane * lane]) = make_float4(x[0], x[1], x[2], x[3]);
    *reinterpret_cast<uint2*>(&sm.v[t][kPerLane * lane]) =
        *reinterpret_cast<const uint2*>(rows.v(tile_row + t, h) + kPerLane * lane);
  }
  __syncthreads();

  // 2. K block b, dim j (rows r0 .. r0 + nb of the tile; nb <= 0 when the
  // sequence ended in an earlier block: zero digits and scales).
  {
    const int b = tid / kDim, j = tid % kDim, r0 = b * kBlock;
    const int nb = n - r0 < 0 ? 0 : (n - r0 < kBlock ? n - r0 : kBlock);
    float mu = 0.0f;
    if (nb > 0) {
      float sum = 0.0f;
      for (int t = 0; t < nb; ++t) sum = __fadd_rn(sum, sm.k[r0 + t][j]);
      mu = __fdiv_rn(sum, float(nb));
    }
    // (fmaxf from 0 as the definition's max: a NaN mean is skipped.)
    const float m_scale =
        scale_of(block_max(sm, fmaxf(0.0f, fabsf(mu)), b), float(kvi8s::kMeanMax));
    const int m16 = nb > 0 ? code_of(mu, m_scale, kvi8s::kMeanMax) : 0;
    const int h8 = (m16 + 128) >> 8, l8 = m16 - 256 * h8;
    reinterpret_cast<int8_t*>(record + (2 * b) * kDim)[j] = int8_t(h8);
    reinterpret_cast<int8_t*>(record + (2 * b + 1) * kDim)[j] = int8_t(l8);
    const float mean = usable(m_scale) ? __fmul_rn(float(m16), m_scale) : 0.0f;
    float amax = 0.0f;
    for (int t = 0; t < nb; ++t) amax = fmaxf(amax, fabsf(__fsub_rn(sm.k[r0 + t][j], mean)));
    const float scale = scale_of(block_max(sm, amax, b), float(kvi8s::kMaxCode));
    int8_t* code = k_code + (first_row + tile_row + r0) * code_stride + h * kDim + j;
    for (int t = 0; t < nb; ++t)
      code[t * code_stride] =
          int8_t(code_of(__fsub_rn(sm.k[r0 + t][j], mean), scale, kvi8s::kMaxCode));
    if (j == 0) {
      scales[b] = nb > 0 ? scale : 0.0f;
      scales[kBlocks + b] = nb > 0 && usable(m_scale) ? m_scale : 0.0f;
    }
    if (tid >= 2 * kBlocks && tid < kDim / 4)  // the scales row past its four floats
      scales[tid] = 0.0f;
  }

  // 3. V channel d over keys [p0, p0 + kKeys) of the tile, in v_position
  // order (its inverse maps each 16-key group onto itself).
  {
    constexpr int kKeys = kTile / kVHalves;
    const int half = tid / kDim, d = tid % kDim, p0 = half * kKeys;
    float amax = 0.0f;
    for (int t = p0; t < p0 + kKeys && t < n; ++t)
      amax = fmaxf(amax, fabsf(__uint_as_float(uint32_t(sm.v[t][d]) << 16)));
    sm.v_amax[half][d] = amax;
    __syncthreads();
#pragma unroll
    for (int o = 0; o < kVHalves; ++o) amax = fmaxf(amax, sm.v_amax[o][d]);
    const float s = scale_of(amax, kvi8s::kE4m3Max);
    if (half == 0)
      reinterpret_cast<float*>(record + kvi8s::kRowVScale * kDim)[d] =
          usable(s) ? __fmul_rn(s, kvi8s::kInvPScale) : 0.0f;
    uint8_t* v_row = v_code + (h * kDim + d) * v_stride + first_row + tile_row;
    for (int q = p0; q < p0 + kKeys; q += 16) {  // 16 keys: one 16-byte store
      uint32_t w[4];
#pragma unroll
      for (int k4 = 0; k4 < 4; ++k4) {
        w[k4] = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          // The key at position p: v_position's inverse within its 16-key group.
          const int p = q + 4 * k4 + i,
                    t = (p & ~15) + 2 * ((p & 15) >> 2) + (i & 1) + 8 * (i >> 1);
          const float v = __uint_as_float(uint32_t(t < n ? sm.v[t][d] : 0) << 16);
          const uint8_t c =
              (t < n && usable(s)) ? f32_to_e4m3_satfinite(__fdiv_rn(v, s)) : uint8_t(0);
          w[k4] |= uint32_t(c) << (8 * i);
        }
      }
      *reinterpret_cast<uint4*>(v_row + q) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

}  // namespace

void kvi8s_quantize(const KvRowParts& in, int64_t first_row, int64_t heads, int8_t* k_code,
                    int64_t code_stride, uint8_t* v_code, int64_t v_stride, uint8_t* header,
                    cudaStream_t s) {
  const int64_t n = in.rows[0] + in.rows[1];
  if (n <= 0 || heads <= 0) return;
  if (!aligned_to(v_code, 16) || v_stride % 16 != 0 || first_row % 16 != 0)
    fail_internal("kvi8s_quantize: V^T rows must start on 16-byte boundaries (16-key stores)");
  const dim3 grid(unsigned((n + kTile - 1) / kTile), unsigned(heads));
  // Per call rather than once: the attribute is per device, and it is cheap.
  const cudaError_t e = cudaFuncSetAttribute(
      kvi8s_quantize_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes);
  if (e != cudaSuccess) fail_cuda("kvi8s_quantize: reserving shared memory", e);
  kvi8s_quantize_kernel<<<grid, kThreads, kSmemBytes, s>>>(Rows{in}, n, first_row, heads, k_code,
                                                           code_stride, v_code, v_stride, header);
  check_launch("kvi8s_quantize");
}

}  // namespace h3s::cuda
