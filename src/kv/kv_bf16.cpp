// The exact bf16 K/V store.
#include "kv/kv_bf16.hpp"

#include <algorithm>

namespace h3s {

KvBf16Store::KvBf16Store(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim,
                         int64_t kv_block)
    : seq_(seq), heads_(heads), head_dim_(head_dim), kv_block_(kv_block) {
  expect_kv_block(kv_block);
  k_ = arena.tensor(DType::bf16, {heads, seq, head_dim}, "K store");
  v_ = arena.tensor(DType::bf16, {heads, seq, head_dim}, "V store");
}

size_t KvBf16Store::bytes(int64_t seq, int64_t heads, int64_t head_dim) {
  return size_t(2) * size_t(seq) * size_t(heads * head_dim) * 2;
}

KvView KvBf16Store::view() const {
  // [seq, heads, head_dim] over [heads, seq, head_dim] storage.
  auto as_seq_major = [&](const Tensor& t) {
    Tensor s = t;
    s.shape = {seq_, heads_, head_dim_, 0};
    s.stride = {head_dim_, seq_ * head_dim_, 1, 0};
    return s;
  };
  return {as_seq_major(k_.view), as_seq_major(v_.view)};
}

void KvBf16Store::write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) {
  const KvView all = view();
  auto rows3 = [&](const Tensor& t) {  // [rows, heads * hd] -> [rows, heads, hd]
    Tensor s = t;
    s.rank = 3;
    s.shape = {t.rows(), heads_, head_dim_, 0};
    s.stride = {t.row_stride(), head_dim_, 1, 0};
    return s;
  };
  backend.copy(rows3(k), all.k.rows_view(rows.begin, rows.end));
  backend.copy(rows3(v), all.v.rows_view(rows.begin, rows.end));
}

void KvBf16Store::attend(Backend& backend, std::span<const QueryChunk> chunks) {
  const KvView kv = view();
  attend_in_blocks(
      backend, chunks, seq_, kv_block_, false,
      [&](const Tensor& q, RowRange keys, AttnState& s) { backend.attention(q, kv, keys, s); });
}

}  // namespace h3s
