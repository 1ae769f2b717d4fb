// Session 43 experiment (CPU, not part of the product): kvi8s' attention error against exact
// attention with K smoothed by (def) the definition's per-64-token-block mean, (seq) one mean per
// head over the whole sequence (SageAttention-2's recipe, issue 12's owner option (b)), (none) no
// mean. Everything else is the definition of record (kv/kvi8s.hpp): the library's quantise_tile
// for V and the header layout, attend_row for the attention. With one mean for every block, the
// per-block correction q.m adds the same value to every score of a row (the same digits and
// m_scale in every header), so attend_row computes (seq)'s attention up to fp32 rounding.
//   usage: seq_mean_accuracy TOKENS HEADS
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.hpp"
#include "kv/kvi8r.hpp"
#include "kv/kvi8s.hpp"

using namespace h3s;
namespace ks = h3s::kvi8s;
constexpr int D = 128;

static uint16_t to_bf16(float x) {
  return f32_to_bf16(x).bits;
}
static float from_bf16(uint16_t b) {
  return bf16_to_f32(bf16{b});
}
static bool usable(float s) {
  return s > 0.0f && std::isfinite(s);
}
static int32_t code_of(float x, float s, int32_t lim) {
  if (!usable(s)) return 0;
  const float c = std::nearbyint(x / s);
  return std::fabs(c) <= float(lim) ? int32_t(c) : 0;
}
static float scale_of(float amax, float lim) {
  return amax / lim * (1.0f + 0x1p-7f);
}

enum class Mean { def, seq, none };

// One head: q, k, v bf16 [n][128]; returns rel-rms of the tier's output vs fp64 exact.
static double head_error(const std::vector<uint16_t>& q, const std::vector<uint16_t>& k,
                         const std::vector<uint16_t>& v, int64_t n, Mean mean,
                         const std::vector<double>& exact) {
  const int64_t padded = ks::padded_seq(n), tiles = ks::tiles(n);
  std::vector<int8_t> kc(size_t(n * D));
  std::vector<uint8_t> vc(size_t(D * padded)), hdr(size_t(tiles * ks::kHeaderBytes));
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t row = t * ks::kTile, rows = std::min(ks::kTile, n - row);
    ks::quantise_tile(&k[size_t(row * D)], &v[size_t(row * D)], D, rows, &kc[size_t(row * D)], D,
                      &vc[size_t(row)], padded, &hdr[size_t(t * ks::kHeaderBytes)], true);
  }
  if (mean != Mean::def) {
    // The rotated K, its sequence mean (fp32, token order), then every block's codes again.
    std::vector<float> rot(size_t(n * D));
    float sum[D] = {};
    for (int64_t t = 0; t < n; ++t) {
      float* r = &rot[size_t(t * D)];
      for (int d = 0; d < D; ++d) r[d] = from_bf16(k[size_t(t * D + d)]);
      kvi8r::rotate(r);
      for (int d = 0; d < D; ++d) sum[d] += r[d];
    }
    float mu[D], mean_amax = 0.0f;
    for (int d = 0; d < D; ++d) {
      mu[d] = mean == Mean::seq ? sum[d] / float(n) : 0.0f;
      mean_amax = std::fmax(mean_amax, std::fabs(mu[d]));
    }
    const float m_scale = scale_of(mean_amax, float(ks::kMeanMax));
    int8_t hi[D], lo[D];
    float m_value[D];
    for (int d = 0; d < D; ++d) {
      const int32_t m16 = code_of(mu[d], m_scale, ks::kMeanMax);
      hi[d] = int8_t((m16 + 128) >> 8);
      lo[d] = int8_t(m16 - 256 * int32_t(hi[d]));
      m_value[d] = usable(m_scale) ? float(m16) * m_scale : 0.0f;
    }
    for (int64_t b0 = 0; b0 < n; b0 += ks::kBlock) {
      const int64_t rows = std::min(ks::kBlock, n - b0);
      const int b = int((b0 % ks::kTile) / ks::kBlock);
      uint8_t* header = &hdr[size_t((b0 / ks::kTile) * ks::kHeaderBytes)];
      float amax = 0.0f;
      for (int64_t t = b0; t < b0 + rows; ++t)
        for (int d = 0; d < D; ++d)
          amax = std::fmax(amax, std::fabs(rot[size_t(t * D + d)] - m_value[d]));
      const float scale = scale_of(amax, float(ks::kMaxCode));
      for (int64_t t = b0; t < b0 + rows; ++t)
        for (int d = 0; d < D; ++d)
          kc[size_t(t * D + d)] =
              int8_t(code_of(rot[size_t(t * D + d)] - m_value[d], scale, ks::kMaxCode));
      std::memcpy(header + (2 * b) * D, hi, D);
      std::memcpy(header + (2 * b + 1) * D, lo, D);
      const float ms = usable(m_scale) ? m_scale : 0.0f;
      std::memcpy(header + ks::kRowScales * D + b * 4, &scale, 4);
      std::memcpy(header + ks::kRowScales * D + (ks::kBlocksPerTile + b) * 4, &ms, 4);
    }
  }
  const ks::HeadRows kv{kc.data(), D, vc.data(), padded, hdr.data(), ks::kHeaderBytes};
  double err = 0.0, ref = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    float qr[D];
    for (int d = 0; d < D; ++d) qr[d] = from_bf16(q[size_t(i * D + d)]);
    kvi8r::rotate(qr);
    uint16_t qb[D];
    for (int d = 0; d < D; ++d) qb[d] = to_bf16(qr[d]);
    float m = -INFINITY, l = 0.0f, acc[D] = {};
    ks::attend_row(qb, kv, 0, n, m, l, acc);
    for (int d = 0; d < D; ++d) {
      const double o = from_bf16(to_bf16(acc[d] / l)), e = exact[size_t(i * D + d)];
      err += (o - e) * (o - e);
      ref += e * e;
    }
  }
  return std::sqrt(err / ref);
}

static std::vector<double> exact_attention(const std::vector<uint16_t>& q,
                                           const std::vector<uint16_t>& k,
                                           const std::vector<uint16_t>& v, int64_t n) {
  std::vector<double> out(size_t(n * D));
  std::vector<double> s(static_cast<size_t>(n));
  const double c = 1.0 / std::sqrt(double(D));
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY;
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0.0;
      for (int d = 0; d < D; ++d)
        dot += double(from_bf16(q[size_t(i * D + d)])) * from_bf16(k[size_t(j * D + d)]);
      s[size_t(j)] = dot * c;
      mx = std::max(mx, s[size_t(j)]);
    }
    double l = 0.0;
    for (int64_t j = 0; j < n; ++j) l += (s[size_t(j)] = std::exp(s[size_t(j)] - mx));
    for (int d = 0; d < D; ++d) {
      double o = 0.0;
      for (int64_t j = 0; j < n; ++j) o += s[size_t(j)] * from_bf16(v[size_t(j * D + d)]);
      out[size_t(i * D + d)] = o / l;
    }
  }
  return out;
}

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 4096;
  const int heads = argc > 2 ? std::atoi(argv[2]) : 4;
  const char* inputs[] = {"gaussian", "outlier", "segments"};
  for (const char* name : inputs) {
    double e2[3] = {}, w = 0;  // mean of per-head squared errors (heads weigh alike)
    std::vector<std::thread> pool;
    std::vector<std::array<double, 3>> per(static_cast<size_t>(heads));
    for (int h = 0; h < heads; ++h)
      pool.emplace_back([&, h] {
        std::mt19937_64 rng(1000 + 17 * h);
        std::normal_distribution<float> N01(0.0f, 1.0f), N4(0.0f, 2.0f);
        std::uniform_real_distribution<float> U(0.5f, 2.0f);
        const std::string in = name;
        std::vector<float> offset(D), seg_offset(4 * D);
        for (float& x : offset) x = N4(rng);
        for (float& x : seg_offset) x = N4(rng);
        std::vector<uint16_t> q(size_t(n * D)), k(q.size()), v(q.size());
        for (int64_t t = 0; t < n; ++t) {
          const float row_scale = in == "outlier" ? U(rng) : 1.0f;
          const int seg = int(t * 4 / n);  // four equal segments, each its own K offset
          for (int d = 0; d < D; ++d) {
            float qq = N01(rng), kk = N01(rng), vv = N01(rng);
            if (in == "outlier") {
              qq *= row_scale;
              if (d == 3 || d == 17 || d == 64 || d == 100) kk *= 20.0f;
              kk += offset[size_t(d)];
              if (d == 5 || d == 77) vv *= 10.0f;
            } else if (in == "segments") {
              kk += seg_offset[size_t(seg * D + d)];
            }
            q[size_t(t * D + d)] = to_bf16(qq);
            k[size_t(t * D + d)] = to_bf16(kk);
            v[size_t(t * D + d)] = to_bf16(vv);
          }
        }
        const std::vector<double> ex = exact_attention(q, k, v, n);
        for (int m = 0; m < 3; ++m) per[size_t(h)][size_t(m)] = head_error(q, k, v, n, Mean(m), ex);
      });
    for (auto& t : pool) t.join();
    for (int h = 0; h < heads; ++h, ++w)
      for (int m = 0; m < 3; ++m) e2[m] += per[size_t(h)][size_t(m)] * per[size_t(h)][size_t(m)];
    std::printf(
        "{\"input\": \"%s\", \"tokens\": %lld, \"heads\": %d, \"rel_rms_block_mean\": %.5f, "
        "\"rel_rms_sequence_mean\": %.5f, \"rel_rms_no_mean\": %.5f}\n",
        name, (long long)n, heads, std::sqrt(e2[0] / w), std::sqrt(e2[1] / w),
        std::sqrt(e2[2] / w));
    std::fflush(stdout);
  }
}
