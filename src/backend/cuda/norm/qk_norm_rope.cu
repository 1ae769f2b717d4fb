// Per-head q/k RMSNorm + split-half RoPE in place, bit-exact with
// cpu::rms_rope_head (backend/cpu/qk_norm_rope.cpp), which itself reproduces
// comfy-kitchen's fused rms_rope kernel (golden ck_rms_rope).
//
// One warp per (row, head): lane l holds head dims l, l+32, l+64, l+96, the
// exact shape the reference's sum of squares spells out (fma in that order,
// then a butterfly over 16, 8, 4, 2, 1 lanes); the head moves between global
// and shared memory in 8-byte pieces. Each (row, head) is computed alone, so
// the op is row-invariant.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {
namespace {

constexpr int kHead = 128;
constexpr int kPerLane = kHead / 32;
constexpr int kWarps = 8;  // (row, head) pairs per CTA
constexpr int kThreads = kWarps * 32;

__global__ void __launch_bounds__(kThreads)
    qk_norm_rope_kernel(uint16_t* t, int64_t ldt, int64_t pairs, int64_t heads,
                        const uint16_t* __restrict__ w, const uint16_t* __restrict__ rope,
                        int64_t ld_rope, float eps, int rot_dim, bool vec, bool rope_pairs) {
  __shared__ float normed[kWarps][kHead];
  __shared__ __align__(8) uint16_t staged[kWarps][kHead];  // the head's bf16 in and out
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t pair = int64_t(blockIdx.x) * kWarps + warp;
  if (pair >= pairs) return;  // whole warps only: the shuffles below stay full
  const int64_t row = pair / heads, head = pair % heads;
  uint16_t* p = t + row * ldt + head * kHead;
  uint16_t* st = staged[warp];

  // The head's 256 bytes in one coalesced 8-byte load per lane (when aligned),
  // then lane l takes dims l, l+32, l+64, l+96 from shared memory.
  if (vec) {
    *reinterpret_cast<uint2*>(st + 4 * lane) = *reinterpret_cast<const uint2*>(p + 4 * lane);
  } else {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) st[lane + 32 * j] = p[lane + 32 * j];
  }
  __syncwarp();
  // fast-math kernels flush subnormal inputs to zero; the reference does too.
  float x[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) x[j] = flush_subnormal(bf16_to_f32(st[lane + 32 * j]));
  // Sum of squares, then the butterfly. Lane l adds lane l ^ off: for l < off
  // that is the reference's lane[l] + lane[l + off]; the upper lanes hold the
  // same sums (a + b == b + a exactly), so every lane ends with lane[0].
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) s = __fmaf_rn(x[j], x[j], s);
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
  const float rr = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(s, float(kHead)), eps)));

  float n[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    n[j] = round_bf16(__fmul_rn(__fmul_rn(x[j], rr), bf16_to_f32(w[d])));
    normed[warp][d] = n[j];
  }
  __syncwarp();  // normed complete, and every lane is done reading st

  const int half = rot_dim / 2;
  const uint16_t* rp = rope + row * ld_rope;
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    float y = n[j];
    if (d < rot_dim) {
      const int i = d < half ? d : d - half;
      // One (cos, sin) pair: a 4-byte load when the table is aligned for it.
      uint32_t cs;
      if (rope_pairs)
        cs = *reinterpret_cast<const uint32_t*>(rp + 2 * i);
      else
        cs = uint32_t(rp[2 * i]) | uint32_t(rp[2 * i + 1]) << 16;
      const float c = bf16_to_f32(uint16_t(cs & 0xffffu)), sn = bf16_to_f32(uint16_t(cs >> 16));
      if (d < half) {
        const float a = n[j], b = normed[warp][d + half];
        y = __fsub_rn(__fmul_rn(c, a), __fmul_rn(sn, b));  // out[i] = c*a - s*b
      } else {
        const float a = normed[warp][i], b = n[j];
        y = __fadd_rn(__fmul_rn(sn, a), __fmul_rn(c, b));  // out[i + half] = s*a + c*b
      }
    }
    st[d] = f32_to_bf16_arith(y);
  }
  __syncwarp();
  if (vec) {
    *reinterpret_cast<uint2*>(p + 4 * lane) = *reinterpret_cast<const uint2*>(st + 4 * lane);
  } else {
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) p[lane + 32 * j] = st[lane + 32 * j];
  }
}

}  // namespace

void qk_norm_rope(uint16_t* t, int64_t ldt, int64_t m, int64_t heads, const uint16_t* w,
                  const uint16_t* rope, int64_t ld_rope, float eps, int64_t rot_dim,
                  cudaStream_t s) {
  if (m == 0 || heads == 0) return;
  if (rot_dim < 0 || rot_dim > kHead || rot_dim % 2 != 0)
    fail_internal("qk_norm_rope: rot_dim must be even and at most 128");
  const int64_t pairs = m * heads;
  const int64_t blocks = (pairs + kWarps - 1) / kWarps;
  if (blocks > 0x7fffffff) fail_internal("qk_norm_rope: too many (row, head) pairs in one call");
  const bool vec = aligned_to(t, 8) && ldt % 4 == 0;  // every head starts 8-byte aligned
  const bool rope_pairs = aligned_to(rope, 4) && ld_rope % 2 == 0;
  qk_norm_rope_kernel<<<unsigned(blocks), kThreads, 0, s>>>(t, ldt, pairs, heads, w, rope, ld_rope,
                                                            eps, int(rot_dim), vec, rope_pairs);
  check_launch("qk_norm_rope");
}

}  // namespace h3s::cuda
