// The kvfp4s definition of record (see kvfp4s.hpp).
#include "kv/kvfp4s.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/math.hpp"
#include "core/dtype.hpp"
#include "kv/kvi8r.hpp"

namespace h3s::kvfp4s {

namespace {

static_assert(kBlock % 128 == 0, "a 128-key attention tile lies in one stat block");

// NVFP4 of n rows x[t][kDim] with the block's global: codes and scales per
// row; returns the global.
float quantise_nvfp4(const float (*x)[kDim], int64_t n, uint8_t* code, int64_t code_stride,
                     uint8_t* scale, int64_t scale_stride) {
  float amax = 0.0f;
  for (int64_t t = 0; t < n; ++t)
    for (int d = 0; d < kDim; ++d) amax = std::fmax(amax, std::fabs(x[t][d]));
  const float global = amax / (kE4m3Max * kE2m1Max);
  for (int64_t t = 0; t < n; ++t) {
    uint8_t* c = code + t * code_stride;
    std::fill(c, c + kDim / 2, uint8_t(0));
    for (int g = 0; g < kGroups; ++g) {
      float gmax = 0.0f;
      for (int d = g * kGroup; d < (g + 1) * kGroup; ++d)
        gmax = std::fmax(gmax, std::fabs(x[t][d]));
      const uint8_t s8 =
          global > 0.0f ? f32_to_e4m3(std::min(gmax / kE2m1Max / global, kE4m3Max)) : uint8_t(0);
      scale[t * scale_stride + g] = s8;
      const float step = e4m3_to_f32(s8) * global;
      for (int d = g * kGroup; d < (g + 1) * kGroup; ++d) {
        const uint8_t q = step > 0.0f ? f32_to_e2m1(x[t][d] / step) : uint8_t(0);
        c[d / 2] |= d % 2 == 0 ? uint8_t(q << 4) : q;  // even element: the high nibble
      }
    }
  }
  return global;
}

void load_rows(const uint16_t* src, int64_t src_stride, int64_t n, float (*x)[kDim]) {
  for (int64_t t = 0; t < n; ++t)
    for (int d = 0; d < kDim; ++d) x[t][d] = bf16_to_f32(bf16{src[t * src_stride + d]});
}

}  // namespace

void quantise_k_block(const uint16_t* src, int64_t src_stride, int64_t n, uint8_t* code,
                      int64_t code_stride, uint8_t* scale, int64_t scale_stride, float* global,
                      uint16_t* mean, bool centred, bool rotated) {
  static thread_local float x[kBlock][kDim];
  load_rows(src, src_stride, n, x);
  float sum[kDim] = {};
  for (int64_t t = 0; t < n; ++t) {
    if (rotated) kvi8r::rotate(x[t]);
    for (int d = 0; d < kDim; ++d) sum[d] += x[t][d];
  }
  for (int d = 0; d < kDim; ++d) {
    mean[d] = centred ? f32_to_bf16(sum[d] / float(n)).bits : uint16_t(0);
    const float mu = bf16_to_f32(bf16{mean[d]});
    for (int64_t t = 0; t < n; ++t) x[t][d] -= mu;
  }
  *global = quantise_nvfp4(x, n, code, code_stride, scale, scale_stride);
}

void quantise_v_block(const uint16_t* src, int64_t src_stride, int64_t n, uint8_t* code,
                      int64_t code_stride, uint8_t* scale, int64_t scale_stride, float* global) {
  static thread_local float x[kBlock][kDim];
  load_rows(src, src_stride, n, x);
  *global = quantise_nvfp4(x, n, code, code_stride, scale, scale_stride);
}

void decode_row(const uint8_t* code, const uint8_t* scale, float* out) {
  for (int d = 0; d < kDim; ++d) {
    const uint8_t byte = code[d / 2];
    const uint8_t q = d % 2 == 0 ? uint8_t(byte >> 4) : uint8_t(byte & 0x0f);
    out[d] = e2m1_to_f32(q) * e4m3_to_f32(scale[d / kGroup]);
  }
}

void attend_row(const uint16_t* q_bf16, const HeadRows& kv, int64_t begin, int64_t end, float& m,
                float& l, float* acc) {
  constexpr int64_t kTile = 128;  // the exact path's key tile
  const float inv_sqrt_d = 1.0f / std::sqrt(float(kDim));
  float q[kDim], mean[kDim], p[kTile], t[kDim], row[kDim];
  for (int d = 0; d < kDim; ++d) q[d] = bf16_to_f32(bf16{q_bf16[d]});
  for (int64_t k0 = begin; k0 < end; k0 += kTile) {
    const int64_t n = std::min(kTile, end - k0), b = k0 / kBlock;
    const uint16_t* mb = kv.k_mean + b * kv.mean_stride;
    for (int d = 0; d < kDim; ++d) mean[d] = bf16_to_f32(bf16{mb[d]});
    const float corr = cpu::dot_f32(q, mean, kDim), gk = kv.k_global[b * kv.global_stride];
    float mt = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n; ++j) {
      decode_row(kv.k_code + (k0 + j) * kv.code_stride, kv.k_scale + (k0 + j) * kv.scale_stride,
                 row);
      p[j] = (cpu::dot_f32(q, row, kDim) * gk + corr) * inv_sqrt_d;
      mt = std::max(mt, p[j]);
    }
    const cpu::SoftmaxStep s = cpu::softmax_tile(p, n, mt, m);
    std::fill(t, t + kDim, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      decode_row(kv.v_code + (k0 + j) * kv.code_stride, kv.v_scale + (k0 + j) * kv.scale_stride,
                 row);
      for (int d = 0; d < kDim; ++d) t[d] += p[j] * row[d];
    }
    const float gv = kv.v_global[b * kv.global_stride];
    l = l * s.alpha + s.psum;
    for (int d = 0; d < kDim; ++d) acc[d] = acc[d] * s.alpha + t[d] * gv;
    m = s.m_new;
  }
}

int64_t store_bytes(int64_t seq, int64_t heads) {
  const int64_t blocks = (seq + kBlock - 1) / kBlock;
  return 2 * seq * heads * (kDim / 2 + kGroups) + blocks * heads * (kDim * 2 + 2 * 4);
}

}  // namespace h3s::kvfp4s
