// ConvRot rotation and the int8 row quantiser (see convrot.hpp).
#include "model/convrot.hpp"

#include <cmath>
#include <vector>

#include "core/dtype.hpp"

namespace h3s {

void convrot_rotate_group(float* v) {
  for (int stride = 1; stride < 256; stride *= 4) {
    for (int i = 0; i < 256; ++i) {
      if ((i / stride) % 4 != 0) continue;
      const float x0 = v[i], x1 = v[i + stride], x2 = v[i + 2 * stride], x3 = v[i + 3 * stride];
      const float s01 = x0 + x1;
      v[i] = 0.5f * ((s01 + x2) - x3);
      v[i + stride] = 0.5f * ((s01 - x2) + x3);
      v[i + 2 * stride] = 0.5f * (((x0 - x1) + x2) + x3);
      v[i + 3 * stride] = 0.5f * (((x1 - x0) + x2) + x3);
    }
  }
}

void quantize_rotated_row(const float* r, int64_t k, int8_t* q, float* scale) {
  float absmax = 0.0f;
  for (int64_t i = 0; i < k; ++i) {
    const float a = std::fabs(r[i]);
    if (a > absmax) absmax = a;  // NaN compares false: ignored, like fmaxf
  }
  constexpr float kBf16Max = 3.38953139e38f;
  constexpr float kInv127 = 1.0f / 127.0f;
  const float s = std::fmax(std::fmin(absmax, kBf16Max) * kInv127, 1e-30f);
  *scale = s;
  const float sb = round_bf16(s);
  for (int64_t i = 0; i < k; ++i) {
    const float d = round_bf16(round_bf16(r[i]) / sb);
    int v;
    if (std::isnan(d)) {
      v = -128;  // cvt.rni of NaN gives INT_MIN, clamped
    } else {
      const float rd = std::nearbyint(std::fmax(std::fmin(d, 127.0f), -128.0f));
      v = int(rd);
    }
    q[i] = int8_t(v);
  }
}

void quantize_row_convrot(const float* x, int64_t k, int8_t* q, float* scale) {
  thread_local std::vector<float> r;
  r.assign(x, x + k);
  for (int64_t g = 0; g < k; g += 256) convrot_rotate_group(r.data() + g);
  quantize_rotated_row(r.data(), k, q, scale);
}

}  // namespace h3s
