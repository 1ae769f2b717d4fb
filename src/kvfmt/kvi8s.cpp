// The kvi8s definition of record (see kvi8s.hpp).
#include "kvfmt/kvi8s.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "core/dtype.hpp"
#include "core/online_softmax.hpp"
#include "kvfmt/kvi8r.hpp"

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

bool usable(float scale) {
  return scale > 0.0f && std::isfinite(scale);
}

// Round half to even of x / scale; zero for an unusable scale (rows no real
// activation has) or a value past `limit`.
int32_t code_of(float x, float scale, int32_t limit) {
  if (!usable(scale)) return 0;
  const float c = std::nearbyint(x / scale);
  return std::fabs(c) <= float(limit) ? int32_t(c) : 0;
}

// amax / limit with (1 + 2^-7) of headroom: x / scale stays inside +-limit.
float scale_of(float amax, float limit) {
  return amax / limit * (1.0f + 0x1p-7f);
}

void put_float(uint8_t* header, int row, int i, float f) {
  std::memcpy(header + row * kDim + i * 4, &f, 4);
}

// K of one 64-token block: codes, and the mean's digits and scales in the header.
void quantise_k_block(const uint16_t* src, int64_t src_stride, int64_t n, int8_t* code,
                      int64_t code_stride, uint8_t* header, int b, bool rotated) {
  float rot[kBlock][kDim];
  float sum[kDim] = {};
  for (int64_t t = 0; t < n; ++t) {
    for (int d = 0; d < kDim; ++d) rot[t][d] = bf16_to_f32(bf16{src[t * src_stride + d]});
    if (rotated) kvi8r::rotate(rot[t]);
    for (int d = 0; d < kDim; ++d) sum[d] += rot[t][d];
  }
  float mu[kDim], mean_amax = 0.0f;
  for (int d = 0; d < kDim; ++d) {
    mu[d] = sum[d] / float(n);
    mean_amax = std::fmax(mean_amax, std::fabs(mu[d]));
  }
  const float m_scale = scale_of(mean_amax, float(kMeanMax));
  auto* hi = reinterpret_cast<int8_t*>(header + (2 * b) * kDim);
  auto* lo = reinterpret_cast<int8_t*>(header + (2 * b + 1) * kDim);
  float amax = 0.0f;
  for (int d = 0; d < kDim; ++d) {
    const int32_t m16 = code_of(mu[d], m_scale, kMeanMax);
    hi[d] = int8_t((m16 + 128) >> 8);
    lo[d] = int8_t(m16 - 256 * int32_t(hi[d]));
    const float mean = usable(m_scale) ? float(m16) * m_scale : 0.0f;
    for (int64_t t = 0; t < n; ++t) {
      rot[t][d] -= mean;
      amax = std::fmax(amax, std::fabs(rot[t][d]));
    }
  }
  const float scale = scale_of(amax, float(kMaxCode));
  for (int64_t t = 0; t < n; ++t)
    for (int d = 0; d < kDim; ++d)
      code[t * code_stride + d] = int8_t(code_of(rot[t][d], scale, kMaxCode));
  put_float(header, kRowScales, b, scale);
  put_float(header, kRowScales, kBlocksPerTile + b, usable(m_scale) ? m_scale : 0.0f);
}

}  // namespace

void quantise_tile(const uint16_t* k, const uint16_t* v, int64_t src_stride, int64_t n,
                   int8_t* k_code, int64_t code_stride, uint8_t* v_code, int64_t v_stride,
                   uint8_t* header, bool rotated) {
  std::fill(header, header + kHeaderBytes, uint8_t(0));
  for (int b = 0; b < kBlocksPerTile && b * kBlock < n; ++b) {
    const int64_t r0 = b * kBlock, rows = std::min(kBlock, n - r0);
    quantise_k_block(k + r0 * src_stride, src_stride, rows, k_code + r0 * code_stride, code_stride,
                     header, b, rotated);
  }
  for (int d = 0; d < kDim; ++d) {
    float amax = 0.0f;
    for (int64_t t = 0; t < n; ++t)
      amax = std::fmax(amax, std::fabs(bf16_to_f32(bf16{v[t * src_stride + d]})));
    const float s = scale_of(amax, kE4m3Max);
    put_float(header, kRowVScale, d, usable(s) ? s * kInvPScale : 0.0f);
    uint8_t* row = v_code + d * v_stride;
    std::fill(row, row + kTile, uint8_t(0));
    if (!usable(s)) continue;
    for (int64_t t = 0; t < n; ++t)
      row[v_position(t)] = f32_to_e4m3(bf16_to_f32(bf16{v[t * src_stride + d]}) / s);
  }
}

float quantise_q_row(const uint16_t* q_rot, int8_t* code) {
  float x[kDim];
  float amax = 0.0f;
  for (int d = 0; d < kDim; ++d) {
    x[d] = bf16_to_f32(bf16{q_rot[d]});
    amax = std::fmax(amax, std::fabs(x[d]));
  }
  const float s = scale_of(amax, float(kMaxCode));
  for (int d = 0; d < kDim; ++d) code[d] = int8_t(code_of(x[d], s, kMaxCode));
  return s;
}

int32_t dot_codes(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int d = 0; d < kDim; ++d) s += int32_t(a[d]) * int32_t(b[d]);
  return s;
}

void attend_row(const uint16_t* q_bf16, const HeadRows& kv, int64_t begin, int64_t end, float& m,
                float& l, float* acc) {
  constexpr float c = score_log2_scale(kDim);  // scores in log2 units
  float p[kTile], o[kDim];
  int8_t qc[kDim];
  const float q_scale = quantise_q_row(q_bf16, qc);
  float qk[kBlocksPerTile], corr[kBlocksPerTile];
  const std::array<float, 256>& e4m3 = e4m3_values();
  for (int64_t k0 = begin; k0 < end; k0 += kTile) {
    const int64_t n = std::min(kTile, end - k0);
    const uint8_t* header = kv.header + (k0 / kTile) * kv.header_stride;
    for (int b = 0; b < kBlocksPerTile; ++b) {
      const auto* hi = reinterpret_cast<const int8_t*>(header + (2 * b) * kDim);
      const auto* lo = reinterpret_cast<const int8_t*>(header + (2 * b + 1) * kDim);
      const int32_t dm = 256 * dot_codes(qc, hi) + dot_codes(qc, lo);
      qk[b] = q_scale * k_scale(header, b) * c;
      corr[b] = float(dm) * (q_scale * m_scale(header, b) * c);
    }
    float mt = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      const int b = int(j / kBlock);
      const int32_t dq = dot_codes(qc, kv.k_code + (k0 + j) * kv.code_stride);
      p[j] = std::fma(float(dq), qk[b], corr[b]);
      mt = std::max(mt, p[j]);
    }
    const SoftmaxStep s = softmax_tile(p, n, mt, 1.0f, m);  // already in log2 units
    for (int64_t j = 0; j < n; ++j) p[j] = e4m3[f32_to_e4m3(p[j] * kPScale)];
    for (int d = 0; d < kDim; ++d) {  // channel by channel: V's row is contiguous in keys
      const uint8_t* vc = kv.v_code + d * kv.v_stride + k0;
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) sum += p[j] * e4m3[vc[v_position(j)]];
      o[d] = sum;
    }
    l = l * s.alpha + s.psum;
    for (int d = 0; d < kDim; ++d) acc[d] = std::fma(o[d], v_scale(header, d), acc[d] * s.alpha);
    m = s.m_new;
  }
}

int64_t store_bytes(int64_t seq, int64_t heads) {
  return seq * heads * kDim + padded_seq(seq) * heads * kDim + tiles(seq) * heads * kHeaderBytes;
}

}  // namespace h3s::kvi8s
