// The online softmax's step over one key tile, as the exact attention (the
// CPU backend's attention.cpp) and every K/V tier's definition of record
// (kvfmt/) run it: one (query row, head) folds a tile's scores into its
// state (running max m in log2 units, sum l, fp32 accumulator), in key order.
// The arithmetic is core/softmax_scale.hpp's: the scale c folded into the
// exponent's fma, the state's m in log2 units.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/dot_f32.hpp"
#include "core/dtype.hpp"
#include "core/softmax_scale.hpp"

namespace h3s {

// p holds the tile's n scores x and xt their max; c takes a score into log2
// units (kScoreLog2Scale for raw q.k; 1 for scores already in log2 units,
// kvi8s', where fma(x, 1, -m) is x - m). m: the running max (log2 units).
// p becomes 2^fma(x, c, -m_new) in place, in key order.
struct SoftmaxStep {
  float m_new;  // max(m, fl(xt * c))
  float alpha;  // the old state's rescale, 2^(m - m_new) (0 before any key)
  float psum;   // sum of the tile's probabilities, in key order
};
inline SoftmaxStep softmax_tile(float* p, int64_t n, float xt, float c, float m) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // c > 0: rounding is monotone, so fl(xt * c) is the max of the fl(x * c)
  // (-inf stays -inf).
  SoftmaxStep s{std::max(m, xt * c), 0.0f, 0.0f};
  // m_new is -inf only while every key so far is masked: 0 in its place
  // keeps the exponent at -inf (probability 0) instead of NaN.
  const float base = s.m_new == -kInf ? 0.0f : s.m_new;
  s.alpha = m == -kInf ? 0.0f : std::exp2(m - s.m_new);
  for (int64_t j = 0; j < n; ++j) {
    p[j] = std::exp2(std::fma(p[j], c, -base));
    s.psum += p[j];
  }
  return s;
}

// One key tile of the online softmax for one (query row, head), the exact
// attention's order (attention.cpp) that kvi8r's reference follows too. On
// entry p holds the tile's n raw scores (q.k) and xt their max; it folds
// them into (m, l, acc[hd]) with c = score_log2_scale(hd) (the caller's, taken
// once). v_scale (null: none) multiplies each probability before it weights
// its V row (kvi8r's per-key scale). o: hd floats of scratch.
inline void fold_key_tile(float* p, int64_t n, float xt, float c, const float* vt,
                          const float* v_scale, int64_t hd, float& m, float& l, float* acc,
                          float* o) {
  const SoftmaxStep s = softmax_tile(p, n, xt, c, m);
  std::fill(o, o + hd, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float w = v_scale != nullptr ? p[j] * v_scale[j] : p[j];
    const float* vj = vt + j * hd;
    for (int64_t d = 0; d < hd; ++d) o[d] += w * vj[d];
  }
  l = l * s.alpha + s.psum;
  for (int64_t d = 0; d < hd; ++d) acc[d] = acc[d] * s.alpha + o[d];
  m = s.m_new;
}

// n query rows (row i: bf16 at q_bf16 + i * q_stride, taken as fp32; its
// state at m[i * ml_stride], l[i * ml_stride], acc + i * acc_stride) over one
// tile of n_keys dequantised keys (kt, vt: n_keys x hd fp32): raw scores
// dot(q, k), then fold_key_tile with c. Each row's arithmetic is its own, so
// the rows' grouping never moves a bit. q, p (n_keys) and o (hd): scratch.
inline void attend_tile_rows(const uint16_t* q_bf16, int64_t q_stride, int64_t rows,
                             const float* kt, const float* vt, int64_t n_keys, int64_t hd, float c,
                             float* m, float* l, int64_t ml_stride, float* acc, int64_t acc_stride,
                             float* q, float* p, float* o) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t d = 0; d < hd; ++d) q[d] = bf16_to_f32(bf16{q_bf16[i * q_stride + d]});
    float xt = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n_keys; ++j) {
      p[j] = dot_f32(q, kt + j * hd, hd);
      xt = std::max(xt, p[j]);
    }
    fold_key_tile(p, n_keys, xt, c, vt, nullptr, hd, m[i * ml_stride], l[i * ml_stride],
                  acc + i * acc_stride, o);
  }
}

}  // namespace h3s
