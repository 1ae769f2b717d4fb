// The kvi8s definition of record (see kvi8s.hpp).
#include "kv/kvi8s.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "backend/cpu/math.hpp"
#include "core/dtype.hpp"
#include "kv/kvi8r.hpp"

namespace h3s::kvi8s {

namespace {

// e4m3 -> fp32 for every code: the P V loop decodes 128 codes per key.
const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[size_t(c)] = e4m3_to_f32(uint8_t(c));
    return t;
  }();
  return table;
}

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
                      int64_t code_stride, float* scale, uint16_t* mean, bool rotated) {
  float rot[kBlock][kDim];
  float sum[kDim] = {};
  for (int64_t t = 0; t < n; ++t) {
    for (int d = 0; d < kDim; ++d) rot[t][d] = bf16_to_f32(bf16{src[t * src_stride + d]});
    if (rotated) kvi8r::rotate(rot[t]);
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

void attend_row(const uint16_t* q_bf16, const HeadRows& kv, int64_t begin, int64_t end, float& m,
                float& l, float* acc) {
  constexpr int64_t kTile = 128, kBlocksPerTile = kTile / kBlock;  // the exact path's key tile
  const float scale = 1.0f / std::sqrt(float(kDim));
  float q[kDim], mean[kDim], p[kTile], o[kDim], t[kDim];
  int8_t qc[kDim];
  for (int d = 0; d < kDim; ++d) q[d] = bf16_to_f32(bf16{q_bf16[d]});
  const float q_scale = quantise_q_row(q_bf16, qc);
  float corr[kBlocksPerTile], qk_scale[kBlocksPerTile];
  const std::array<float, 256>& e4m3 = e4m3_values();
  for (int64_t k0 = begin; k0 < end; k0 += kTile) {
    const int64_t n = std::min(kTile, end - k0);
    const int64_t nb = (n + kBlock - 1) / kBlock, b0 = k0 / kBlock;
    for (int64_t i = 0; i < nb; ++i) {
      const uint16_t* mb = kv.k_mean + (b0 + i) * kv.block_stride;
      for (int d = 0; d < kDim; ++d) mean[d] = bf16_to_f32(bf16{mb[d]});
      corr[i] = cpu::dot_f32(q, mean, kDim);
      qk_scale[i] = q_scale * kv.k_scale[(b0 + i) * kv.k_scale_stride];
    }
    float mt = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = j / kBlock;
      const int32_t dq = dot_codes(qc, kv.k_code + (k0 + j) * kv.code_stride);
      p[j] = (float(dq) * qk_scale[i] + corr[i]) * scale;
      mt = std::max(mt, p[j]);
    }
    const cpu::SoftmaxStep s = cpu::softmax_tile(p, n, mt, m);
    std::fill(t, t + kDim, 0.0f);
    for (int64_t i = 0; i < nb; ++i) {  // P V per block in fp32, then its channel scales
      std::fill(o, o + kDim, 0.0f);
      for (int64_t j = i * kBlock; j < std::min(n, (i + 1) * kBlock); ++j) {
        const float p8 = e4m3[f32_to_e4m3(p[j] * kPScale)];
        const uint8_t* vc = kv.v_code + (k0 + j) * kv.code_stride;
        for (int d = 0; d < kDim; ++d) o[d] += p8 * e4m3[vc[d]];
      }
      const float* sv = kv.v_scale + (b0 + i) * kv.block_stride;
      for (int d = 0; d < kDim; ++d) t[d] += o[d] * sv[d];
    }
    l = l * s.alpha + s.psum;
    for (int d = 0; d < kDim; ++d) acc[d] = acc[d] * s.alpha + t[d] * kInvPScale;
    m = s.m_new;
  }
}

int64_t store_bytes(int64_t seq, int64_t heads) {
  const int64_t blocks = (seq + kBlock - 1) / kBlock;
  return 2 * seq * heads * kDim + blocks * heads * (4 + kDim * 2 + kDim * 4);
}

}  // namespace h3s::kvi8s
