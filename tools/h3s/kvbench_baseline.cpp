// `h3s kvbench`'s host baselines (kvbench_baseline.hpp).
#include "kvbench_baseline.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/dtype.hpp"
#include "kvfmt/kvfp4s.hpp"
#include "kvfmt/kvi8r.hpp"
#include "kvfmt/kvi8s.hpp"

namespace h3s::cli::kvbench {

// The tier's recipe without the Hadamard basis, on the host.
Rows baseline_attention(KvTier tier, const Inputs& in, ThreadPool& pool) {
  const int64_t n = in.tokens, heads = in.heads;
  const int64_t inner = heads * kHd, padded = kvi8s::padded_seq(n);
  const bool i8s = tier == KvTier::kvi8s;
  std::vector<int8_t> kc(i8s ? size_t(n * inner) : 0);                  // kvi8s' K codes
  std::vector<uint8_t> rk(i8s ? 0 : size_t(n * inner)), rv(rk.size());  // kvi8r's (biased)
  std::vector<uint8_t> vc(i8s ? size_t(inner * padded) : 0),
      header(i8s ? size_t(kvi8s::tiles(n) * heads * kvi8s::kHeaderBytes) : 0);
  std::vector<uint16_t> ks16(size_t(n * heads)), vs16(ks16.size());
  if (tier == KvTier::kvi8r) {
    pool.parallel_for(n, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t t = r0; t < r1; ++t)
        for (int64_t h = 0; h < heads; ++h) {
          const size_t at = size_t(t * inner + h * kHd), s = size_t(t * heads + h);
          kvi8r::quantise_row(&in.k[at], &rk[at], &ks16[s], /*rotated=*/false);
          kvi8r::quantise_row(&in.v[at], &rv[at], &vs16[s], /*rotated=*/false);
        }
    });
  } else {
    pool.parallel_for(kvi8s::tiles(n) * heads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t b = task / heads, h = task % heads, row = b * kvi8s::kTile;
        const int64_t rows = std::min(kvi8s::kTile, n - row);
        const size_t at = size_t(row * inner + h * kHd);
        kvi8s::quantise_tile(&in.k[at], &in.v[at], inner, rows, &kc[at], inner,
                             &vc[size_t(h * kHd * padded + row)], padded,
                             &header[size_t(task * kvi8s::kHeaderBytes)], /*rotated=*/false);
      }
    });
  }
  Rows out(size_t(n * inner));
  pool.parallel_for(n * heads, 16, [&](int64_t t0, int64_t t1) {
    auto scratch = std::make_unique<kvi8r::Scratch>();
    float acc[kHd];
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t t = task / heads, h = task % heads;
      const size_t at = size_t(t * inner + h * kHd);
      float m = -INFINITY, l = 0.0f;
      std::fill(acc, acc + kHd, 0.0f);
      if (tier == KvTier::kvi8r) {
        const kvi8r::HeadRows kv{&rk[size_t(h * kHd)],
                                 &ks16[size_t(h)],
                                 &rv[size_t(h * kHd)],
                                 &vs16[size_t(h)],
                                 inner,
                                 heads};
        kvi8r::attend_row(&in.q[at], kv, 0, n, m, l, acc, *scratch);
      } else {
        const kvi8s::HeadRows kv{&kc[size_t(h * kHd)],
                                 inner,
                                 &vc[size_t(h * kHd * padded)],
                                 padded,
                                 &header[size_t(h * kvi8s::kHeaderBytes)],
                                 heads * kvi8s::kHeaderBytes};
        kvi8s::attend_row(&in.q[at], kv, 0, n, m, l, acc);
      }
      for (int64_t d = 0; d < kHd; ++d) out[at + size_t(d)] = f32_to_bf16(acc[d] / l).bits;
    }
  });
  return out;
}

// kvfp4s' baseline by the definition of record, on the host: K rotated and
// (centred: the tier; not: its baseline) NVFP4 per 256-token block and head,
// V NVFP4, the query rotated as rotate_heads leaves it.
Rows fp4s_attention(const Inputs& in, bool centred, ThreadPool& pool) {
  using namespace kvfp4s;
  const int64_t n = in.tokens, heads = in.heads;
  const int64_t inner = heads * kHd, blocks = (n + kBlock - 1) / kBlock;
  const int64_t code_w = heads * kDim / 2, scale_w = heads * kGroups;
  std::vector<uint8_t> kc(size_t(n * code_w)), vc(kc.size()), ks(size_t(n * scale_w)),
      vs(ks.size());
  std::vector<float> kg(size_t(blocks * heads)), vg(kg.size());
  std::vector<uint16_t> mean(size_t(blocks * inner));
  pool.parallel_for(blocks * heads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t b = task / heads, h = task % heads, row = b * kBlock;
      const int64_t rows = std::min(kBlock, n - row);
      const size_t at = size_t(row * inner + h * kHd);
      const size_t c = size_t(row * code_w + h * kDim / 2), s = size_t(row * scale_w + h * kGroups);
      quantise_k_block(&in.k[at], inner, rows, &kc[c], code_w, &ks[s], scale_w, &kg[size_t(task)],
                       &mean[size_t(b * inner + h * kHd)], centred);
      quantise_v_block(&in.v[at], inner, rows, &vc[c], code_w, &vs[s], scale_w, &vg[size_t(task)]);
    }
  });
  // The queries rotated as rotate_heads leaves them, then (head, 32-row
  // block) tasks: each key tile decoded once per task (attend_rows).
  Rows q(size_t(n * inner));
  pool.parallel_for(n * heads, 64, [&](int64_t t0, int64_t t1) {
    float qf[kHd];
    for (int64_t task = t0; task < t1; ++task) {
      const size_t at = size_t(task * kHd);
      for (int64_t d = 0; d < kHd; ++d) qf[d] = bf16_to_f32(bf16{in.q[at + size_t(d)]});
      kvi8r::rotate(qf);
      for (int64_t d = 0; d < kHd; ++d) q[at + size_t(d)] = f32_to_bf16(qf[d]).bits;
    }
  });
  constexpr int64_t kRowBlock = 32;
  const int64_t row_blocks = (n + kRowBlock - 1) / kRowBlock;
  Rows out(size_t(n * inner));
  pool.parallel_for(heads * row_blocks, 1, [&](int64_t t0, int64_t t1) {
    auto scratch = std::make_unique<Scratch>();
    std::vector<float> m(kRowBlock), l(kRowBlock), acc(size_t(kRowBlock * kHd));
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task / row_blocks, r0 = task % row_blocks * kRowBlock;
      const int64_t rows = std::min(kRowBlock, n - r0);
      const HeadRows kv{&kc[size_t(h * kDim / 2)],
                        &ks[size_t(h * kGroups)],
                        &vc[size_t(h * kDim / 2)],
                        &vs[size_t(h * kGroups)],
                        &kg[size_t(h)],
                        &vg[size_t(h)],
                        &mean[size_t(h * kHd)],
                        code_w,
                        scale_w,
                        heads,
                        inner};
      std::fill(m.begin(), m.end(), -INFINITY);
      std::fill(l.begin(), l.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      attend_rows(&q[size_t(r0 * inner + h * kHd)], inner, rows, kv, 0, n, m.data(), l.data(), 1,
                  acc.data(), kHd, *scratch);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t d = 0; d < kHd; ++d)
          out[size_t((r0 + i) * inner + h * kHd + d)] =
              f32_to_bf16(acc[size_t(i * kHd + d)] / l[size_t(i)]).bits;
    }
  });
  return out;
}

}  // namespace h3s::cli::kvbench
