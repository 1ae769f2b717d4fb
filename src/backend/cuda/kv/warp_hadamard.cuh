// The warp-level pieces both 8-bit tiers' row kernels share: the
// Hadamard-128 rotation of kvi8r::rotate (bit-exact: the reference's IEEE
// adds and subtracts in its butterfly order, then the 2^-3.5 scale) on a
// warp holding one 128-vector, lane L elements 4L .. 4L + 3, so butterfly
// stages 1 and 2 stay in the lane and stages 4 .. 64 pair lane L with
// L ^ (h / 4); and the 4-element bf16 load.
#pragma once

#include <cstdint>

namespace h3s::cuda::kv {

inline constexpr int kDim = 128;
inline constexpr int kPerLane = kDim / 32;           // 4
inline constexpr float kNorm = 0.0883883461356163f;  // 2^-3.5, kvi8r::kNorm

// kvi8r::rotate on the warp's 128 values.
__device__ __forceinline__ void rotate128(float (&v)[kPerLane], int lane) {
#pragma unroll
  for (int h = 1; h < kPerLane; h *= 2)
#pragma unroll
    for (int j = 0; j < kPerLane; ++j)
      if ((j & h) == 0) {
        const float a = v[j], b = v[j + h];
        v[j] = __fadd_rn(a, b);
        v[j + h] = __fsub_rn(a, b);
      }
#pragma unroll
  for (int h = kPerLane; h < kDim; h *= 2) {
    const int partner = h / kPerLane;
    const bool upper = (lane & partner) != 0;  // this lane holds the j + h side
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const float o = __shfl_xor_sync(0xffffffffu, v[j], partner);
      v[j] = upper ? __fsub_rn(o, v[j]) : __fadd_rn(v[j], o);
    }
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) v[j] = __fmul_rn(v[j], kNorm);
}

__device__ __forceinline__ void load_bf16x4(const uint16_t* p, float (&v)[kPerLane]) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  const uint32_t u[2] = {w.x, w.y};
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    v[2 * i] = __uint_as_float(u[i] << 16);
    v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}

}  // namespace h3s::cuda::kv
