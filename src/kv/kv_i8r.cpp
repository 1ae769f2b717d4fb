// The kvi8r K/V tier, resident (see kv_i8r.hpp).
#include "kv/kv_i8r.hpp"

#include <algorithm>

namespace h3s {

KvI8rStore::KvI8rStore(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim, int64_t kv_block)
    : seq_(seq), kv_block_(kv_block) {
  if (kv_block < 0 || kv_block % kAttnKvTile != 0)
    fail(ErrorKind::invalid_argument,
         "kv_block = {} must be 0 (one pass) or a multiple of the {}-key attention tile", kv_block,
         kAttnKvTile);
  k_code_ = arena.tensor(DType::i8, {seq, heads * head_dim}, "K codes (kvi8r)");
  k_scale_ = arena.tensor(DType::f16, {seq, heads}, "K scales (kvi8r)");
  v_code_ = arena.tensor(DType::i8, {seq, heads * head_dim}, "V codes (kvi8r)");
  v_scale_ = arena.tensor(DType::f16, {seq, heads}, "V scales (kvi8r)");
}

size_t KvI8rStore::bytes(int64_t seq, int64_t heads, int64_t head_dim) {
  return size_t(2) * size_t(seq) * size_t(heads) * size_t(head_dim + 2);
}

KvI8View KvI8rStore::view() const {
  return {k_code_.view, k_scale_.view, v_code_.view, v_scale_.view};
}

void KvI8rStore::write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) {
  backend.kvi8r_quantize(k, k_code_.view.rows_view(rows.begin, rows.end),
                         k_scale_.view.rows_view(rows.begin, rows.end));
  backend.kvi8r_quantize(v, v_code_.view.rows_view(rows.begin, rows.end),
                         v_scale_.view.rows_view(rows.begin, rows.end));
}

void KvI8rStore::attend(Backend& backend, std::span<const QueryChunk> chunks) {
  const KvI8View kv = view();
  const int64_t step = kv_block_ == 0 ? std::max<int64_t>(seq_, 1) : kv_block_;
  for (const QueryChunk& c : chunks) {
    backend.rotate_heads(c.q);
    for (int64_t b = 0; b < seq_; b += step)
      backend.attention_kvi8r(c.q, kv, {b, std::min(seq_, b + step)}, *c.state);
  }
}

void KvI8rStore::finish(Backend& backend, const AttnState& state, const Tensor& out) {
  backend.attn_state_finish_rotated(state, out);
}

}  // namespace h3s
