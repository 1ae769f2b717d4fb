// The attention's score scale, folded into the exponent (docs/DESIGN.md
// "Attention arithmetic"): one definition for the CPU reference, every K/V
// tier's definition of record and the CUDA kernels (attn_params.cuh), so that
// a state written by one call means the same to the next on every backend.
//
// A raw score x = q.k (fp32) enters the softmax as x * c in log2 units,
// c = log2(e) / sqrt(head_dim): the tile max mt = fl(max_j x_j * c), the
// running max m = max(m, mt) (log2 units wherever a state is kept: across
// K/V blocks, host-staged tiles and ranks), p_j = 2^fma(x_j, c, -m) (one fma
// a score, as FlashAttention does), alpha = 2^(m_old - m_new).
#pragma once

#include <cstdint>

namespace h3s {

// sqrt for constants (Newton in double; std::sqrt is not constexpr in C++20).
constexpr double constexpr_sqrt(double x) {
  double y = x > 1.0 ? x : 1.0;
  for (int i = 0; i < 64; ++i) y = 0.5 * (y + x / y);
  return y;
}

// c for a head dimension: (1 / sqrt(d)) * log2(e) in double, rounded once to
// float.
constexpr float score_log2_scale(int64_t head_dim) {
  return float((1.0 / constexpr_sqrt(double(head_dim))) * 1.4426950408889634);
}

// The engine's c (head_dim 128): the float nearest log2(e) / sqrt(128)
// (0.1275174308245987 in exact arithmetic).
inline constexpr float kScoreLog2Scale = score_log2_scale(128);
static_assert(kScoreLog2Scale == 0x1.0527dcp-3f, "bits 0x3e0293ee");

}  // namespace h3s
