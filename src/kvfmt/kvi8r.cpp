// The kvi8r definition of record (see kvi8r.hpp).
#include "kvfmt/kvi8r.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/dtype.hpp"
#include "core/online_softmax.hpp"

namespace h3s::kvi8r {

static_assert(std::bit_cast<uint32_t>(kNorm) == 0x3db504f3u, "1/sqrt(128) rounded to fp32");

void rotate(float* v) {
  for (int h = 1; h < kDim; h *= 2)
    for (int i = 0; i < kDim; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
  for (int i = 0; i < kDim; ++i) v[i] = v[i] * kNorm;
}

uint16_t f16_round_up(float f) {
  const uint16_t r = f32_to_f16(f);
  if (f16_to_f32(r) >= f || r == 0x7c00u) return r;
  return uint16_t(r + 1);  // the next fp16 up (positive values: the bit pattern + 1)
}

void quantise_row(const uint16_t* bf16_row, uint8_t* code, uint16_t* scale_f16, bool rotated) {
  float x[kDim];
  for (int i = 0; i < kDim; ++i) x[i] = bf16_to_f32(bf16{bf16_row[i]});
  if (rotated) rotate(x);
  float amax = 0.0f;
  for (int i = 0; i < kDim; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  // (1 + 2^-7) of headroom, then fp16 rounded up: x / scale stays inside
  // +-127 whatever the roundings, so no code saturates.
  const uint16_t s = f16_round_up(amax / float(kMaxCode) * (1.0f + 0x1p-7f));
  const float scale = f16_to_f32(s);
  *scale_f16 = s;
  // (Non-finite rows, which no real activation has, give codes 0 rather than
  // an out-of-range conversion.)
  for (int i = 0; i < kDim; ++i) {
    const float c = scale == 0.0f ? 0.0f : std::nearbyint(x[i] / scale);
    code[i] = uint8_t((std::fabs(c) <= float(kMaxCode) ? int(c) : 0) + kCodeBias);
  }
}

uint16_t dequantise_f16(uint8_t stored, uint16_t scale_f16) {
  return f32_to_f16(float(int(stored) - kCodeBias) * f16_to_f32(scale_f16));
}

float dequantise(uint8_t stored, uint16_t scale_f16) {
  return f16_to_f32(dequantise_f16(stored, scale_f16));
}

void attend_rows(const uint16_t* q_bf16, int64_t q_stride, int64_t rows, const HeadRows& kv,
                 int64_t begin, int64_t end, float* m, float* l, int64_t ml_stride, float* acc,
                 int64_t acc_stride, Scratch& w) {
  constexpr int64_t kTile = 128;               // the exact path's key tile (kAttnKvTile)
  constexpr float c = score_log2_scale(kDim);  // the exact path's scale
  float q[kDim];
  for (int64_t k0 = begin; k0 < end; k0 += kTile) {
    const int64_t n = std::min(kTile, end - k0);
    for (int64_t j = 0; j < n; ++j) {
      const uint8_t* kc = kv.k_code + (k0 + j) * kv.code_stride;
      const uint8_t* vc = kv.v_code + (k0 + j) * kv.code_stride;
      const uint16_t ks = kv.k_scale[(k0 + j) * kv.scale_stride];
      const uint16_t vs = kv.v_scale[(k0 + j) * kv.scale_stride];
      for (int d = 0; d < kDim; ++d) {
        w.kt[j * kDim + d] = dequantise(kc[d], ks);
        w.vt[j * kDim + d] = dequantise(vc[d], vs);
      }
    }
    attend_tile_rows(q_bf16, q_stride, rows, w.kt, w.vt, n, kDim, c, m, l, ml_stride, acc,
                     acc_stride, q, w.p, w.o);
  }
}

void attend_row(const uint16_t* q_bf16, const HeadRows& kv, int64_t begin, int64_t end, float& m,
                float& l, float* acc, Scratch& w) {
  attend_rows(q_bf16, kDim, 1, kv, begin, end, &m, &l, 1, acc, kDim, w);
}

}  // namespace h3s::kvi8r
