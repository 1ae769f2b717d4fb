// The fp32 dot product of record: every kernel that produces one (the CPU
// backend's GEMM and norms, the K/V tiers' definitions in kvfmt/, the CUDA
// kernels' fixed order) sums in exactly this order, so a dot is the same bits
// wherever it is computed (docs/DESIGN.md, invariant 1).
#pragma once

#include <cstdint>

namespace h3s {

// fp32 dot products use kDotLanes partial sums (lane l adds k = l, l + 8, ...
// in increasing k), a fixed pairwise tree, then the K % 8 tail in order.
inline constexpr int kDotLanes = 8;

inline float reduce_lanes(const float* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

inline float dot_f32(const float* x, const float* w, int64_t k) {
  float acc[kDotLanes] = {};
  const int64_t kv = k / kDotLanes * kDotLanes;
  for (int64_t i = 0; i < kv; i += kDotLanes)
    for (int l = 0; l < kDotLanes; ++l) acc[l] += x[i + l] * w[i + l];
  float s = reduce_lanes(acc);
  for (int64_t i = kv; i < k; ++i) s += x[i] * w[i];
  return s;
}

}  // namespace h3s
