// The kvi8r tier's row ops on the GPU, bit-exact with its definition of
// record (kvfmt/kvi8r.hpp, which the CPU backend runs): the Hadamard-128
// rotation, the per-(token, head) int8 quantiser, the queries' rotation and
// the un-rotating finish. One warp per (row, head); lane L holds elements
// 4L .. 4L + 3, so butterfly stages 1 and 2 stay in the lane and stages
// 4 .. 64 pair lane L with L ^ (h / 4). Every add, subtract, divide and
// rounding is the reference's IEEE operation in the reference's order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kv/warp_hadamard.cuh"

namespace h3s::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr float kMaxCode = 127.0f;
constexpr float kHeadroom = 1.0f + 0x1p-7f;
constexpr int kCodeBias = 128;  // kvi8r::kCodeBias: the store holds code + 128
using kv::kDim;
using kv::kPerLane;
using kv::load_bf16x4;
using kv::rotate128;

__device__ __forceinline__ void store_bf16x4(uint16_t* p, const float (&v)[kPerLane]) {
  uint16_t b[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) b[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v[i]));
  *reinterpret_cast<uint2*>(p) =
      make_uint2(uint32_t(b[0]) | uint32_t(b[1]) << 16, uint32_t(b[2]) | uint32_t(b[3]) << 16);
}

// kvi8r::f16_round_up: the fp16 at or above f (f finite and >= 0).
__device__ __forceinline__ uint16_t f16_round_up(float f) {
  const __half h = __float2half_rn(f);
  const uint16_t r = __half_as_ushort(h);
  if (__half2float(h) >= f || r == 0x7c00u) return r;
  return uint16_t(r + 1);
}

struct WarpTask {
  int64_t row, head;
  int lane;
  bool live;
  __device__ static WarpTask of(int64_t rows, int64_t heads) {
    const int64_t task = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    return {task / heads, task % heads, int(threadIdx.x % 32), task < rows * heads};
  }
};

__global__ void kvi8r_quantize_kernel(const uint16_t* src, int64_t lds, uint8_t* code, int64_t ldc,
                                      uint16_t* scale, int64_t scale_row, int64_t scale_head,
                                      int64_t rows, int64_t heads) {
  const WarpTask w = WarpTask::of(rows, heads);
  if (!w.live) return;
  float x[kPerLane];
  load_bf16x4(src + w.row * lds + w.head * kDim + kPerLane * w.lane, x);
  rotate128(x, w.lane);
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) amax = fmaxf(amax, fabsf(x[j]));
#pragma unroll
  for (int o = 16; o > 0; o /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const uint16_t s = f16_round_up(__fmul_rn(__fdiv_rn(amax, kMaxCode), kHeadroom));
  const float sf = __half2float(__ushort_as_half(s));
  uint32_t packed = 0;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const float c = sf == 0.0f ? 0.0f : rintf(__fdiv_rn(x[j], sf));
    const int q = fabsf(c) <= kMaxCode ? int(c) : 0;  // NaN: 0, as the reference
    packed |= uint32_t(q + kCodeBias) << (8 * j);
  }
  *reinterpret_cast<uint32_t*>(code + w.row * ldc + w.head * kDim + kPerLane * w.lane) = packed;
  if (w.lane == 0) scale[w.row * scale_row + w.head * scale_head] = s;
}

__global__ void rotate_heads_kernel(uint16_t* t, int64_t ldt, int64_t rows, int64_t heads) {
  const WarpTask w = WarpTask::of(rows, heads);
  if (!w.live) return;
  uint16_t* p = t + w.row * ldt + w.head * kDim + kPerLane * w.lane;
  float x[kPerLane];
  load_bf16x4(p, x);
  rotate128(x, w.lane);
  store_bf16x4(p, x);
}

__global__ void finish_rotated_kernel(const float* l, const float* acc, uint16_t* out, int64_t ldo,
                                      int64_t rows, int64_t heads) {
  const WarpTask w = WarpTask::of(rows, heads);
  if (!w.live) return;
  const int64_t sh = w.row * heads + w.head;
  const float4 a = *reinterpret_cast<const float4*>(acc + sh * kDim + kPerLane * w.lane);
  const float denom = l[sh];
  float y[kPerLane] = {__fdiv_rn(a.x, denom), __fdiv_rn(a.y, denom), __fdiv_rn(a.z, denom),
                       __fdiv_rn(a.w, denom)};
  rotate128(y, w.lane);
  store_bf16x4(out + w.row * ldo + w.head * kDim + kPerLane * w.lane, y);
}

unsigned blocks_for(int64_t rows, int64_t heads) {
  return unsigned((rows * heads + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void kvi8r_quantize(const uint16_t* src, int64_t lds, uint8_t* code, int64_t ldc, uint16_t* scale,
                    int64_t scale_row, int64_t scale_head, int64_t rows, int64_t heads,
                    cudaStream_t s) {
  if (rows <= 0 || heads <= 0) return;
  kvi8r_quantize_kernel<<<blocks_for(rows, heads), kWarpsPerBlock * 32, 0, s>>>(
      src, lds, code, ldc, scale, scale_row, scale_head, rows, heads);
  check_launch("kvi8r_quantize");
}

void kvi8r_rotate_heads(uint16_t* t, int64_t ldt, int64_t rows, int64_t heads, cudaStream_t s) {
  if (rows <= 0 || heads <= 0) return;
  rotate_heads_kernel<<<blocks_for(rows, heads), kWarpsPerBlock * 32, 0, s>>>(t, ldt, rows, heads);
  check_launch("kvi8r_rotate_heads");
}

void kvi8r_finish_rotated(const float* l, const float* acc, uint16_t* out, int64_t ldo,
                          int64_t rows, int64_t heads, cudaStream_t s) {
  if (rows <= 0 || heads <= 0) return;
  finish_rotated_kernel<<<blocks_for(rows, heads), kWarpsPerBlock * 32, 0, s>>>(l, acc, out, ldo,
                                                                                rows, heads);
  check_launch("kvi8r_finish_rotated");
}

}  // namespace h3s::cuda
