// The kvmix definition of record (see kvmix.hpp).
#include "kvfmt/kvmix.hpp"

#include <algorithm>
#include <charconv>
#include <numeric>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "kvfmt/kvfp4s.hpp"
#include "kvfmt/kvi8r.hpp"

namespace h3s::kvmix {

namespace {
constexpr int kDim = kvfp4s::kDim;
}  // namespace

std::vector<RowRange> sample_windows(int64_t seq) {
  std::vector<RowRange> w;
  if (seq <= 0) return w;
  const int64_t blocks = (seq + kvfp4s::kBlock - 1) / kvfp4s::kBlock;
  const int64_t n = std::min(blocks, kSampleBlocks);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = i * blocks / n;
    w.push_back({b * kvfp4s::kBlock, std::min(seq, (b + 1) * kvfp4s::kBlock)});
  }
  return w;
}

namespace {

// One head's fp4 sensitivity (kvmix.hpp) over the sample rows.
double head_sensitivity(const uint16_t* q, const uint16_t* k, const uint16_t* v, int64_t stride,
                        std::span<const int64_t> window_rows, int64_t n, int64_t h) {
  std::vector<uint8_t> code(size_t(kvfp4s::kBlock * kDim / 2));
  std::vector<uint8_t> scale(size_t(kvfp4s::kBlock * kvfp4s::kGroups));
  std::vector<uint16_t> mean(kDim);
  float tilde[kDim], exact[kDim];
  double q2 = 0, dk2 = 0, dv2 = 0, v2 = 0;
  int64_t row0 = 0;
  for (const int64_t rows : window_rows) {
    const int64_t at = row0 * stride + h * kDim;
    for (int64_t r = 0; r < rows; ++r)
      for (int d = 0; d < kDim; ++d) {
        const double x = bf16_to_f32(bf16{q[at + r * stride + d]});
        q2 += x * x;
      }
    float global = 0.0f;
    kvfp4s::quantise_k_block(&k[at], stride, rows, code.data(), kDim / 2, scale.data(),
                             kvfp4s::kGroups, &global, mean.data());
    for (int64_t r = 0; r < rows; ++r) {
      kvfp4s::decode_kv_row(&code[size_t(r * kDim / 2)], &scale[size_t(r * kvfp4s::kGroups)],
                            global, mean.data(), tilde);
      for (int d = 0; d < kDim; ++d) exact[d] = bf16_to_f32(bf16{k[at + r * stride + d]});
      kvi8r::rotate(exact);
      for (int d = 0; d < kDim; ++d) dk2 += double(tilde[d] - exact[d]) * (tilde[d] - exact[d]);
    }
    kvfp4s::quantise_v_block(&v[at], stride, rows, code.data(), kDim / 2, scale.data(),
                             kvfp4s::kGroups, &global);
    for (int64_t r = 0; r < rows; ++r) {
      kvfp4s::decode_kv_row(&code[size_t(r * kDim / 2)], &scale[size_t(r * kvfp4s::kGroups)],
                            global, nullptr, tilde);
      for (int d = 0; d < kDim; ++d) {
        const double x = bf16_to_f32(bf16{v[at + r * stride + d]});
        dv2 += (tilde[d] - x) * (tilde[d] - x);
        v2 += x * x;
      }
    }
    row0 += rows;
  }
  const double logit = (q2 / double(n)) * (dk2 / double(n)) / double(kDim * kDim);
  return logit + (v2 > 0 ? dv2 / v2 : 0.0);
}

}  // namespace

std::vector<double> fp4_sensitivity(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                    int64_t stride, std::span<const int64_t> window_rows,
                                    int64_t heads, ThreadPool* pool) {
  std::vector<double> score(size_t(heads), 0.0);
  const int64_t n = std::accumulate(window_rows.begin(), window_rows.end(), int64_t(0));
  if (n == 0) return score;
  const auto score_heads = [&](int64_t h0, int64_t h1) {
    for (int64_t h = h0; h < h1; ++h)
      score[size_t(h)] = head_sensitivity(q, k, v, stride, window_rows, n, h);
  };
  if (pool)
    pool->parallel_for(heads, 1, score_heads);
  else
    score_heads(0, heads);
  return score;
}

std::vector<int> pick_8bit_heads(std::span<const double> score, int64_t count) {
  std::vector<int> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return score[size_t(a)] > score[size_t(b)]; });
  order.resize(size_t(std::clamp<int64_t>(count, 0, int64_t(order.size()))));
  std::sort(order.begin(), order.end());
  return order;
}

void check_heads(std::span<const int> heads8, int64_t heads) {
  std::vector<bool> seen(size_t(std::max<int64_t>(heads, 0)), false);
  for (const int h : heads8) {
    if (h < 0 || h >= heads)
      fail(ErrorKind::invalid_argument,
           "kv_mix_heads: head {} is not a head of this model (it has heads 0..{})", h, heads - 1);
    if (seen[size_t(h)])
      fail(ErrorKind::invalid_argument, "kv_mix_heads: head {} is listed twice", h);
    seen[size_t(h)] = true;
  }
}

std::vector<int> parse_heads(std::string_view text) {
  const auto trim = [](std::string_view t) {
    while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
    while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
    return t;
  };
  std::vector<int> heads;
  text = trim(text);
  if (text.empty()) return heads;
  for (size_t at = 0; at <= text.size();) {
    const size_t end = std::min(text.find(',', at), text.size());
    const std::string_view item = trim(text.substr(at, end - at));
    int h = -1;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), h);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || h < 0)
      fail(ErrorKind::invalid_argument,
           "kv_mix_heads: '{}' is not a head index (give non-negative integers separated by "
           "commas, e.g. \"0,5,9\")",
           item);
    heads.push_back(h);
    at = end + 1;
  }
  std::sort(heads.begin(), heads.end());
  return heads;
}

std::string format_heads(std::span<const int> heads8) {
  std::string s;
  for (const int h : heads8) {
    if (!s.empty()) s += ',';
    s += std::to_string(h);
  }
  return s;
}

}  // namespace h3s::kvmix
