// The kvi8r definition of record (see kvi8r.hpp).
#include "kv/kvi8r.hpp"

#include <bit>
#include <cmath>

#include "core/dtype.hpp"

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

void quantise_row(const uint16_t* bf16_row, int8_t* code, uint16_t* scale_f16) {
  float x[kDim];
  for (int i = 0; i < kDim; ++i) x[i] = bf16_to_f32(bf16{bf16_row[i]});
  rotate(x);
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
    code[i] = std::fabs(c) <= float(kMaxCode) ? int8_t(c) : int8_t(0);
  }
}

}  // namespace h3s::kvi8r
