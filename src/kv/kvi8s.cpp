// The kvi8s definition of record (see kvi8s.hpp).
#include "kv/kvi8s.hpp"

#include <cmath>

#include "core/dtype.hpp"
#include "kv/kvi8r.hpp"

namespace h3s::kvi8s {

namespace {

// Codes of x / scale, round half to even; zero for a zero or non-finite
// scale (rows no real activation has) rather than an out-of-range value.
int8_t int8_code(float x, float scale) {
  if (!(scale > 0.0f) || !std::isfinite(scale)) return 0;
  const float c = std::nearbyint(x / scale);
  return std::fabs(c) <= float(kMaxCode) ? int8_t(c) : int8_t(0);
}

// amax / 127 with (1 + 2^-7) of headroom: x / scale stays inside +-127.
float int8_scale(float amax) {
  return amax / float(kMaxCode) * (1.0f + 0x1p-7f);
}

}  // namespace

void quantise_k_block(const uint16_t* src, int64_t src_stride, int64_t n, int8_t* code,
                      int64_t code_stride, float* scale, uint16_t* mean) {
  float rot[kBlock][kDim];
  float sum[kDim] = {};
  for (int64_t t = 0; t < n; ++t) {
    for (int d = 0; d < kDim; ++d) rot[t][d] = bf16_to_f32(bf16{src[t * src_stride + d]});
    kvi8r::rotate(rot[t]);
    for (int d = 0; d < kDim; ++d) sum[d] += rot[t][d];
  }
  float mu[kDim];
  for (int d = 0; d < kDim; ++d) {
    mean[d] = f32_to_bf16(sum[d] / float(n)).bits;
    mu[d] = bf16_to_f32(bf16{mean[d]});
  }
  float amax = 0.0f;
  for (int64_t t = 0; t < n; ++t)
    for (int d = 0; d < kDim; ++d) {
      rot[t][d] -= mu[d];
      amax = std::fmax(amax, std::fabs(rot[t][d]));
    }
  *scale = int8_scale(amax);
  for (int64_t t = 0; t < n; ++t)
    for (int d = 0; d < kDim; ++d) code[t * code_stride + d] = int8_code(rot[t][d], *scale);
}

void quantise_v_block(const uint16_t* src, int64_t src_stride, int64_t n, uint8_t* code,
                      int64_t code_stride, float* scale) {
  for (int d = 0; d < kDim; ++d) {
    float amax = 0.0f;
    for (int64_t t = 0; t < n; ++t)
      amax = std::fmax(amax, std::fabs(bf16_to_f32(bf16{src[t * src_stride + d]})));
    const float s = amax / kE4m3Max * (1.0f + 0x1p-7f);
    scale[d] = s;
    const bool usable = s > 0.0f && std::isfinite(s);
    for (int64_t t = 0; t < n; ++t)
      code[t * code_stride + d] =
          usable ? f32_to_e4m3(bf16_to_f32(bf16{src[t * src_stride + d]}) / s) : uint8_t(0);
  }
}

float quantise_q_row(const uint16_t* q_rot, int8_t* code) {
  float x[kDim];
  float amax = 0.0f;
  for (int d = 0; d < kDim; ++d) {
    x[d] = bf16_to_f32(bf16{q_rot[d]});
    amax = std::fmax(amax, std::fabs(x[d]));
  }
  const float s = int8_scale(amax);
  for (int d = 0; d < kDim; ++d) code[d] = int8_code(x[d], s);
  return s;
}

int32_t dot_codes(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int d = 0; d < kDim; ++d) s += int32_t(a[d]) * int32_t(b[d]);
  return s;
}

int64_t store_bytes(int64_t seq, int64_t heads) {
  const int64_t blocks = (seq + kBlock - 1) / kBlock;
  return 2 * seq * heads * kDim + blocks * heads * (4 + kDim * 2 + kDim * 4);
}

}  // namespace h3s::kvi8s
