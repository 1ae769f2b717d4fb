// RMSNorm with optional per-row adaLN modulation (the CPU reference is
// backend/cpu/norm_mod.cpp).
//
// One CTA per row. The sum of squares runs in an order fixed by the column
// index alone: thread t owns the 8-column packets t, t + 256, ... and
// fma-accumulates them in increasing column order; then a warp butterfly and
// a fixed tree over the 8 warps. Neither the row count, nor the pointer
// alignment (which only picks 16-byte or scalar loads of the same packets),
// nor the kernel variant (registers or re-reads, chosen by H) changes that
// order, so the op is row-invariant. The order differs from the
// CPU's 8-lane dot_f32, so rstd may differ in the last bits; everything after
// rstd is the reference's arithmetic with its bf16 roundings.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kPack = 8;  // columns per packet: one 16-byte load of bf16
// Rows up to kThreads * kPack * kMaxPacks columns keep their packets in
// registers between the two passes; longer rows read x again in pass 2.
constexpr int kMaxPacks = 4;

// Up to 8 bf16 values at p (n of them valid; the rest +0) as raw bits.
__device__ __forceinline__ uint4 load_raw(const uint16_t* p, int n, bool vec) {
  if (vec && n == kPack) return *reinterpret_cast<const uint4*>(p);
  uint32_t w[kPack / 2] = {};
#pragma unroll
  for (int j = 0; j < kPack; ++j)  // unrolled with constant indices: stays in registers
    if (j < n) w[j / 2] |= uint32_t(p[j]) << (16 * (j % 2));
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__device__ __forceinline__ void unpack(const uint4& u, float v[kPack]) {
  const uint16_t* b = reinterpret_cast<const uint16_t*>(&u);
#pragma unroll
  for (int j = 0; j < kPack; ++j) v[j] = bf16_to_f32(b[j]);
}

// Sum of squares of one packet, fma in column order (padding adds +0).
__device__ __forceinline__ float add_squares(const uint4& u, float ss) {
  float v[kPack];
  unpack(u, v);
#pragma unroll
  for (int j = 0; j < kPack; ++j) ss = __fmaf_rn(v[j], v[j], ss);
  return ss;
}

struct NormArgs {
  const uint16_t* x;  // may alias out
  int64_t ldx;
  const uint16_t* gamma;
  float eps;
  const uint16_t* shift;
  const uint16_t* scale;
  int64_t ld_mod;
  const int32_t* mod_row;
  uint16_t* out;
  int64_t ldo;
  int64_t h;
  bool vec;
};

// Pass 2 for one packet: the reference's formula with its bf16 roundings.
__device__ __forceinline__ void write_packet(const NormArgs& a, const uint4& xraw, int64_t c, int n,
                                             float rstd, const uint16_t* sh, const uint16_t* sc,
                                             uint16_t* o) {
  float v[kPack], g[kPack], vs[kPack], vh[kPack];
  unpack(xraw, v);
  unpack(load_raw(a.gamma + c, n, a.vec), g);
  if (sc) {
    unpack(load_raw(sc + c, n, a.vec), vs);
    unpack(load_raw(sh + c, n, a.vec), vh);
  }
  uint16_t r[kPack];
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    float y = round_bf16(__fmul_rn(__fmul_rn(v[j], rstd), g[j]));
    if (sc) {
      const float one_plus = round_bf16(__fadd_rn(1.0f, vs[j]));
      y = round_bf16(__fadd_rn(round_bf16(__fmul_rn(y, one_plus)), vh[j]));
    }
    r[j] = uint16_t(__float_as_uint(y) >> 16);  // y is already a bf16 value
  }
  if (a.vec && n == kPack) {
    *reinterpret_cast<uint4*>(o + c) = *reinterpret_cast<const uint4*>(r);
  } else {
#pragma unroll
    for (int j = 0; j < kPack; ++j)
      if (j < n) o[c + j] = r[j];
  }
}

// kPacks > 0: the row has at most kPacks packets per thread, held in
// registers; kPacks == 0: any length, x read again in pass 2. Both visit the
// same packets in the same order, so they give the same bits.
template <int kPacks>
__global__ void __launch_bounds__(kThreads) rms_norm_mod_kernel(NormArgs a) {
  __shared__ float warp_sum[kWarps];
  __shared__ float row_rstd;
  const int64_t row = blockIdx.x;
  const uint16_t* xr = a.x + row * a.ldx;
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  constexpr int64_t kStep = int64_t(kThreads) * kPack;
  const int64_t c0 = int64_t(threadIdx.x) * kPack;
  auto width = [&](int64_t c) { return int(a.h - c < kPack ? a.h - c : kPack); };

  float ss = 0.0f;
  uint4 xv[kPacks > 0 ? kPacks : 1];
  if constexpr (kPacks > 0) {
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const int64_t c = c0 + i * kStep;
      if (c < a.h) xv[i] = load_raw(xr + c, width(c), a.vec);
    }
#pragma unroll
    for (int i = 0; i < kPacks; ++i)
      if (c0 + i * kStep < a.h) ss = add_squares(xv[i], ss);
  } else {
    for (int64_t c = c0; c < a.h; c += kStep)
      ss = add_squares(load_raw(xr + c, width(c), a.vec), ss);
  }
#pragma unroll
  for (int off = 16; off >= 1; off /= 2) ss = __fadd_rn(ss, __shfl_xor_sync(0xffffffffu, ss, off));
  if (lane == 0) warp_sum[warp] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    static_assert(kWarps == 8, "the tree below adds 8 warp sums");
    const float* w = warp_sum;
    const float total = __fadd_rn(__fadd_rn(__fadd_rn(w[0], w[1]), __fadd_rn(w[2], w[3])),
                                  __fadd_rn(__fadd_rn(w[4], w[5]), __fadd_rn(w[6], w[7])));
    // rstd = 1 / sqrt(ss / H + eps), IEEE division and square root.
    row_rstd = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(total, float(a.h)), a.eps)));
  }
  __syncthreads();

  const float rstd = row_rstd;
  const int32_t m = a.mod_row ? a.mod_row[row] : -1;
  const uint16_t* sh = m >= 0 ? a.shift + int64_t(m) * a.ld_mod : nullptr;
  const uint16_t* sc = m >= 0 ? a.scale + int64_t(m) * a.ld_mod : nullptr;
  uint16_t* o = a.out + row * a.ldo;
  // Each thread overwrites only its own packets, after every thread's pass 1
  // (the barrier above): out may alias x.
  if constexpr (kPacks > 0) {
#pragma unroll
    for (int i = 0; i < kPacks; ++i) {
      const int64_t c = c0 + i * kStep;
      if (c < a.h) write_packet(a, xv[i], c, width(c), rstd, sh, sc, o);
    }
  } else {
    for (int64_t c = c0; c < a.h; c += kStep)
      write_packet(a, load_raw(xr + c, width(c), a.vec), c, width(c), rstd, sh, sc, o);
  }
}

}  // namespace

void rms_norm_mod(const uint16_t* x, int64_t ldx, const uint16_t* gamma, float eps,
                  const uint16_t* shift, const uint16_t* scale, int64_t ld_mod,
                  const int32_t* mod_row, uint16_t* out, int64_t ldo, int64_t m, int64_t h,
                  cudaStream_t s) {
  if (m == 0) return;
  if (h <= 0) fail_internal("rms_norm_mod: hidden size must be positive");
  if (m > 0x7fffffff) fail_internal("rms_norm_mod: more than 2^31 - 1 rows in one call");
  bool vec = aligned_to(x, 16) && aligned_to(out, 16) && aligned_to(gamma, 16) && ldx % 8 == 0 &&
             ldo % 8 == 0 && h % 8 == 0;
  if (mod_row) vec = vec && aligned_to(shift, 16) && aligned_to(scale, 16) && ld_mod % 8 == 0;
  const NormArgs a{x, ldx, gamma, eps, shift, scale, ld_mod, mod_row, out, ldo, h, vec};
  // The variant depends on h alone (never on m), and all give the same bits.
  const int64_t packs = (h + int64_t(kThreads) * kPack - 1) / (int64_t(kThreads) * kPack);
  const unsigned grid = unsigned(m);
  static_assert(kMaxPacks == 4, "one case per register-held variant");
  switch (packs) {
    case 1:
      rms_norm_mod_kernel<1><<<grid, kThreads, 0, s>>>(a);
      break;
    case 2:
      rms_norm_mod_kernel<2><<<grid, kThreads, 0, s>>>(a);
      break;
    case 3:
      rms_norm_mod_kernel<3><<<grid, kThreads, 0, s>>>(a);
      break;
    case 4:
      rms_norm_mod_kernel<4><<<grid, kThreads, 0, s>>>(a);
      break;
    default:
      rms_norm_mod_kernel<0><<<grid, kThreads, 0, s>>>(a);
      break;
  }
  check_launch("rms_norm_mod");
}

}  // namespace h3s::cuda
