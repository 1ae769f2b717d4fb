// The kvfp4s tier's quantiser on the GPU, bit-exact with
// kvfp4s::quantise_k_block and quantise_v_block (kvfmt/kvfp4s.hpp, which the
// CPU backend runs): one CTA of two warps per (stat block, head). Warp 0
// takes K: the rows rotated by the warp Hadamard, the block mean in token
// order, then max|r| and the residual's codes (three passes over the rows,
// rotating again rather than keeping 256 rows); warp 1 takes V (max|v|, then
// its codes). Lane L holds channels 4L .. 4L + 3, so a 16-channel group is
// four lanes.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kv/kv_row_parts.cuh"
#include "backend/cuda/kv/warp_hadamard.cuh"
#include "backend/cuda/quant/e4m3.cuh"
#include "kvfmt/kvfp4s.hpp"

namespace h3s::cuda {
namespace {

using kv::kPerLane;
constexpr int kBlock = int(kvfp4s::kBlock);
constexpr int kLanesPerGroup = kvfp4s::kGroup / kPerLane;  // 4
constexpr int kThreads = 64;                               // warp 0: K, warp 1: V
static_assert(kvfp4s::kDim == kv::kDim, "one warp holds one 128-dim row");

// The call's row i (bf16 bits) of head h: the kept tail's rows first.
using Rows = KvRowPartsView<kvfp4s::kDim>;

__device__ __forceinline__ float warp_max(float x, int width) {
  for (int o = width / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// core/dtype's f32_to_bf16: RNE, NaN kept quiet.
__device__ __forceinline__ uint16_t bf16_bits(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// kvfp4s::global_of: amax / (448 * 6) rounded up to a bf16 value.
__device__ __forceinline__ float global_of(float amax) {
  const uint32_t u = __float_as_uint(__fdiv_rn(amax, kvfp4s::kE4m3Max * kvfp4s::kE2m1Max));
  return __uint_as_float((u & 0xffffu) != 0 ? (u | 0xffffu) + 1u : u);
}

__device__ __forceinline__ float e4m3_value(uint8_t c) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3);
  return __half2float(__half(h));
}

// core/dtype's f32_to_e2m1: round half to even onto 0, 0.5, 1, 1.5, 2, 3, 4,
// 6 (the ties 0.25, 1.25, 2.5, 5 go down, 0.75, 1.75, 3.5 up), saturating;
// NaN is +6.
__device__ __forceinline__ uint32_t e2m1(float f) {
  if (isnan(f)) return 7u;
  const float a = fabsf(f);
  const uint32_t c = a <= 0.25f   ? 0u
                     : a < 0.75f  ? 1u
                     : a <= 1.25f ? 2u
                     : a < 1.75f  ? 3u
                     : a <= 2.5f  ? 4u
                     : a < 3.5f   ? 5u
                     : a <= 5.0f  ? 6u
                                  : 7u;
  return (signbit(f) ? 8u : 0u) | c;
}

// One token's NVFP4 of this lane's four values x (the block's global g):
// the group's e4m3 scale (lane 4g writes it) and the four codes, even
// elements in the high nibble (one 16-bit store).
__device__ void quantise_row(const float (&x)[kPerLane], float g, int lane, uint8_t* code,
                             uint8_t* scale) {
  float gmax = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) gmax = fmaxf(gmax, fabsf(x[j]));
  gmax = fmaxf(gmax, __shfl_xor_sync(0xffffffffu, gmax, 1));
  gmax = fmaxf(gmax, __shfl_xor_sync(0xffffffffu, gmax, 2));
  const uint8_t s8 = g > 0.0f
                         ? f32_to_e4m3_satfinite(fminf(
                               __fdiv_rn(__fdiv_rn(gmax, kvfp4s::kE2m1Max), g), kvfp4s::kE4m3Max))
                         : uint8_t(0);
  const float step = __fmul_rn(e4m3_value(s8), g);
  uint32_t c[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) c[j] = step > 0.0f ? e2m1(__fdiv_rn(x[j], step)) : 0u;
  const uint32_t bytes = (c[0] << 4 | c[1]) | (c[2] << 4 | c[3]) << 8;
  *reinterpret_cast<uint16_t*>(code + 2 * lane) = uint16_t(bytes);
  if (lane % kLanesPerGroup == 0) scale[lane / kLanesPerGroup] = s8;
}

// K of one block: rows [row0, row0 + n) of the call, head h.
__device__ void quantise_k(const Rows& rows, int64_t row0, int n, int64_t h, int lane,
                           uint8_t* code, uint8_t* scale, int64_t code_stride, int64_t scale_stride,
                           float* global, uint16_t* mean) {
  float x[kPerLane], sum[kPerLane] = {};
  for (int t = 0; t < n; ++t) {
    kv::load_bf16x4(rows.k(row0 + t, h) + kPerLane * lane, x);
    kv::rotate128(x, lane);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) sum[j] = __fadd_rn(sum[j], x[j]);
  }
  float mu[kPerLane];
  uint16_t mb[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    mb[j] = bf16_bits(__fdiv_rn(sum[j], float(n)));
    mu[j] = __uint_as_float(uint32_t(mb[j]) << 16);
  }
  *reinterpret_cast<uint2*>(mean + kPerLane * lane) =
      make_uint2(mb[0] | uint32_t(mb[1]) << 16, mb[2] | uint32_t(mb[3]) << 16);
  float amax = 0.0f;
  for (int t = 0; t < n; ++t) {
    kv::load_bf16x4(rows.k(row0 + t, h) + kPerLane * lane, x);
    kv::rotate128(x, lane);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) amax = fmaxf(amax, fabsf(__fsub_rn(x[j], mu[j])));
  }
  const float g = global_of(warp_max(amax, 32));
  if (lane == 0) *global = g;
  for (int t = 0; t < n; ++t) {
    kv::load_bf16x4(rows.k(row0 + t, h) + kPerLane * lane, x);
    kv::rotate128(x, lane);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) x[j] = __fsub_rn(x[j], mu[j]);
    quantise_row(x, g, lane, code + t * code_stride, scale + t * scale_stride);
  }
}

// V of one block: its rows as they are.
__device__ void quantise_v(const Rows& rows, int64_t row0, int n, int64_t h, int lane,
                           uint8_t* code, uint8_t* scale, int64_t code_stride, int64_t scale_stride,
                           float* global) {
  float x[kPerLane], amax = 0.0f;
  for (int t = 0; t < n; ++t) {
    kv::load_bf16x4(rows.v(row0 + t, h) + kPerLane * lane, x);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) amax = fmaxf(amax, fabsf(x[j]));
  }
  const float g = global_of(warp_max(amax, 32));
  if (lane == 0) *global = g;
  for (int t = 0; t < n; ++t) {
    kv::load_bf16x4(rows.v(row0 + t, h) + kPerLane * lane, x);
    quantise_row(x, g, lane, code + t * code_stride, scale + t * scale_stride);
  }
}

__global__ void __launch_bounds__(kThreads)
    kvfp4s_quantize_kernel(Rows rows, int64_t n_rows, int64_t first_row, Kvfp4sStore out) {
  const int64_t call_row = int64_t(blockIdx.x) * kBlock, h = blockIdx.y;
  const int n = int(n_rows - call_row < kBlock ? n_rows - call_row : kBlock);
  const int64_t row = first_row + call_row, block = row / kBlock;
  const int lane = int(threadIdx.x) % 32;
  const int64_t code_at = row * out.code_stride + h * (kvfp4s::kDim / 2);
  const int64_t scale_at = row * out.scale_stride + h * kvfp4s::kGroups;
  if (threadIdx.x < 32)
    quantise_k(rows, call_row, n, h, lane, out.k_code + code_at, out.k_scale + scale_at,
               out.code_stride, out.scale_stride, out.k_global + block * out.global_stride + h,
               out.k_mean + block * out.mean_stride + h * kvfp4s::kDim);
  else
    quantise_v(rows, call_row, n, h, lane, out.v_code + code_at, out.v_scale + scale_at,
               out.code_stride, out.scale_stride, out.v_global + block * out.global_stride + h);
}

}  // namespace

void kvfp4s_quantize(const KvRowParts& in, int64_t first_row, int64_t heads, const Kvfp4sStore& out,
                     cudaStream_t s) {
  const int64_t n = in.rows[0] + in.rows[1];
  if (n <= 0 || heads <= 0) return;
  const dim3 grid(unsigned((n + kBlock - 1) / kBlock), unsigned(heads));
  kvfp4s_quantize_kernel<<<grid, kThreads, 0, s>>>(Rows{in}, n, first_row, out);
  check_launch("kvfp4s_quantize");
}

}  // namespace h3s::cuda
