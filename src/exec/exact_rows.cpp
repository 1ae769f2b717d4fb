// exact_av_rows: the rows that attend the exact K/V (see exact_rows.hpp).
#include "exec/exact_rows.hpp"

#include <algorithm>

#include "kv/kv_bf16.hpp"
#include "kv/kv_tier_table.hpp"

namespace h3s {

std::vector<RowRange> exact_query_rows(const ExecOptions& o, const PackedLayout& layout) {
  std::vector<RowRange> rows;
  if (!o.exact_av_rows || kv_tier_exact(o.kv_store)) return rows;
  for (const Segment& s : layout.segments)
    if ((s.kind == SegmentKind::text || s.kind == SegmentKind::audio) && s.size() > 0)
      rows.push_back({s.begin, s.end});
  std::sort(rows.begin(), rows.end(),
            [](const RowRange& a, const RowRange& b) { return a.begin < b.begin; });
  return rows;
}

std::vector<RowRange> exact_query_rows(const ExecOptions& o, std::span<const ModRun> runs) {
  std::vector<RowRange> rows;
  if (!o.exact_av_rows || kv_tier_exact(o.kv_store)) return rows;
  for (const ModRun& r : runs) {
    const int32_t tag = r.mod_row % 3;
    if ((tag != kTagText && tag != kTagAudio) || r.end <= r.begin) continue;
    if (!rows.empty() && rows.back().end == r.begin)
      rows.back().end = r.end;
    else
      rows.push_back({r.begin, r.end});
  }
  std::sort(rows.begin(), rows.end(),
            [](const RowRange& a, const RowRange& b) { return a.begin < b.begin; });
  return rows;
}

std::vector<ExactRowsOut> attend_exact_rows(Backend& be, Arena& arena, const Tensor& q,
                                            RowRange chunk, std::span<const RowRange> exact_rows,
                                            const KvView& kv, int64_t kv_block, int64_t heads,
                                            int64_t head_dim) {
  std::vector<ExactRowsOut> outs;
  const int64_t keys = kv.k.shape[0], step = kv_block == 0 ? std::max<int64_t>(keys, 1) : kv_block;
  for (const RowRange& e : exact_rows) {
    const int64_t b = std::max(e.begin, chunk.begin), end = std::min(e.end, chunk.end);
    if (b >= end) continue;
    const RowRange rel{b - chunk.begin, end - chunk.begin};
    const Tensor qr = q.rows_view(rel.begin, rel.end);
    AttnState s = AttnState::allocate(arena, rel.size(), heads, head_dim);
    be.attn_state_reset(s);
    for (int64_t k0 = 0; k0 < keys; k0 += step)
      be.attention(qr, kv, {k0, std::min(keys, k0 + step)}, s);
    ExactRowsOut o{rel, arena.tensor(DType::bf16, {rel.size(), heads * head_dim}, "exact rows")};
    be.attn_state_finish(s, o.out.view);
    outs.push_back(std::move(o));
  }
  return outs;
}

void paste_exact_rows(Backend& be, std::span<const ExactRowsOut> rows, const Tensor& out) {
  for (const ExactRowsOut& r : rows) be.copy(r.out.view, out.rows_view(r.rows.begin, r.rows.end));
}

size_t exact_rows_store_bytes(const ExecOptions& o, int64_t seq, int64_t heads, int64_t head_dim) {
  if (!o.exact_av_rows || kv_tier_exact(o.kv_store)) return 0;
  return KvBf16Store::bytes(seq, heads, head_dim);
}

}  // namespace h3s
