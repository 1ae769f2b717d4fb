// The kvfp4s definition of record (see kvfp4s.hpp).
#include "kvfmt/kvfp4s.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "core/dtype.hpp"
#include "core/online_softmax.hpp"
#include "kvfmt/kvi8r.hpp"

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
  const float global = global_of(amax);
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

float global_of(float amax) {
  const uint32_t u = std::bit_cast<uint32_t>(amax / (kE4m3Max * kE2m1Max));
  // Up to the next bf16 (non-negative and finite: amax is a max of |x|).
  const uint32_t r = (u & 0xffffu) != 0 ? (u | 0xffffu) + 1u : u;
  return std::bit_cast<float>(r);
}

uint16_t bf16_fma_rn(float x, float g, float c) {
  // a = x g is exact in double; s + err = a + c exactly (Knuth's TwoSum).
  const double a = double(x) * double(g), s = a + double(c);
  const double bb = s - a, err = (a - (s - bb)) + (double(c) - bb);
  if (s == 0.0) return f32_to_bf16(float(s)).bits;
  int e;
  std::frexp(std::fabs(s), &e);
  const int exp = std::max(e - 1, -126);                  // bf16's smallest normal exponent
  const double q = std::ldexp(1.0, exp - 7);              // bf16's step there
  const double t = std::fabs(s) / q, lo = std::floor(t);  // exact: q is a power of 2
  double r = std::nearbyint(t);                           // ties to even
  if (t - lo == 0.5 && err != 0.0) r = (err > 0.0) == (s > 0.0) ? lo + 1.0 : lo;  // not a tie
  return f32_to_bf16(float(std::copysign(r * q, s))).bits;  // a bf16 value (or inf): exact
}

void decode_kv_row(const uint8_t* code, const uint8_t* scale, float global, const uint16_t* mean,
                   float* out) {
  decode_row(code, scale, out);
  for (int d = 0; d < kDim; ++d) {
    // V: + -0 keeps every product's bits (-0 included), as mul.rn.bf16x2 does.
    const float c = mean != nullptr ? bf16_to_f32(bf16{mean[d]}) : -0.0f;
    out[d] = bf16_to_f32(bf16{bf16_fma_rn(out[d], global, c)});
  }
}

void attend_rows(const uint16_t* q_bf16, int64_t q_stride, int64_t rows, const HeadRows& kv,
                 int64_t begin, int64_t end, float* m, float* l, int64_t ml_stride, float* acc,
                 int64_t acc_stride, Scratch& w) {
  constexpr int64_t kTile = 128;               // the exact path's key tile
  constexpr float c = score_log2_scale(kDim);  // the exact path's scale
  float q[kDim];
  for (int64_t k0 = begin; k0 < end; k0 += kTile) {
    const int64_t n = std::min(kTile, end - k0), b = k0 / kBlock;
    const uint16_t* mean = kv.k_mean + b * kv.mean_stride;
    const float gk = kv.k_global[b * kv.global_stride], gv = kv.v_global[b * kv.global_stride];
    for (int64_t j = 0; j < n; ++j) {
      const int64_t key = k0 + j;
      decode_kv_row(kv.k_code + key * kv.code_stride, kv.k_scale + key * kv.scale_stride, gk, mean,
                    w.kt + j * kDim);
      decode_kv_row(kv.v_code + key * kv.code_stride, kv.v_scale + key * kv.scale_stride, gv,
                    nullptr, w.vt + j * kDim);
    }
    attend_tile_rows(q_bf16, q_stride, rows, w.kt, w.vt, n, kDim, c, m, l, ml_stride, acc,
                     acc_stride, q, w.p, w.o);
  }
}

void attend_row(const uint16_t* q_bf16, const HeadRows& kv, int64_t begin, int64_t end, float& m,
                float& l, float* acc, Scratch& w) {
  attend_rows(q_bf16, kDim, 1, kv, begin, end, &m, &l, 1, acc, kDim, w);
}

int64_t store_bytes(int64_t seq, int64_t heads) {
  const int64_t blocks = (seq + kBlock - 1) / kBlock;
  return 2 * seq * heads * (kDim / 2 + kGroups) + blocks * heads * (kDim * 2 + 2 * 4);
}

}  // namespace h3s::kvfp4s
