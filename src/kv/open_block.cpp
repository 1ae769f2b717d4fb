// Block-quantised stores' chunk writes (see open_block.hpp).
#include "kv/open_block.hpp"

#include <fmt/format.h>

#include <vector>

namespace h3s {

OpenBlock::OpenBlock(Arena& arena, KvTier tier, int64_t seq, int64_t inner, int64_t block)
    : tier_(tier), seq_(seq), block_(block) {
  k_tail_ = arena.tensor(DType::bf16, {block - 1, inner},
                         fmt::format("K rows of an open block ({})", kv_tier_name(tier)));
  v_tail_ = arena.tensor(DType::bf16, {block - 1, inner},
                         fmt::format("V rows of an open block ({})", kv_tier_name(tier)));
}

size_t OpenBlock::bytes(int64_t inner, int64_t block) {
  return size_t(2) * size_t(block - 1) * size_t(inner) * 2;
}

void OpenBlock::write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v,
                      const Quantise& quantise) {
  if (rows.begin != written_ || rows.end > seq_ || rows.end < rows.begin)
    fail(ErrorKind::internal,
         "{} store: rows [{}, {}) written after {} of {}: writes must come in sequence order",
         kv_tier_name(tier_), rows.begin, rows.end, written_, seq_);
  const int64_t open = written_ - written_ % block_;  // first row of the open block
  const int64_t kept = written_ - open;
  // Everything up to the last whole block, or to the end of the sequence.
  const int64_t done = rows.end == seq_ ? seq_ : rows.end - rows.end % block_;
  if (done > open) {
    const int64_t from_chunk = done - rows.begin;
    std::vector<Tensor> kp, vp;
    if (kept > 0) {
      kp.push_back(k_tail_.view.rows_view(0, kept));
      vp.push_back(v_tail_.view.rows_view(0, kept));
    }
    kp.push_back(k.rows_view(0, from_chunk));
    vp.push_back(v.rows_view(0, from_chunk));
    quantise(kp, vp, open);
  }
  // Keep the chunk's rows of the block left open: after the rows just
  // quantised, or (when this chunk did not close the open block) after the
  // rows already kept.
  const int64_t keep_from = done > open ? done : rows.begin, keep_at = done > open ? 0 : kept;
  if (rows.end > keep_from) {
    const RowRange src{keep_from - rows.begin, rows.size()};
    const RowRange dst{keep_at, keep_at + rows.end - keep_from};
    backend.copy(k.rows_view(src.begin, src.end), k_tail_.view.rows_view(dst.begin, dst.end));
    backend.copy(v.rows_view(src.begin, src.end), v_tail_.view.rows_view(dst.begin, dst.end));
  }
  written_ = rows.end;
}

void OpenBlock::expect_complete() const {
  if (written_ != seq_)
    fail(ErrorKind::internal, "{} store: attended after {} of {} rows", kv_tier_name(tier_),
         written_, seq_);
}

}  // namespace h3s
