// The kvi8r K/V tier, resident (see kv_i8r.hpp).
#include "kv/kv_i8r.hpp"

#include <algorithm>

namespace h3s {

KvI8rStore::KvI8rStore(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim, int64_t kv_block)
    : seq_(seq), kv_block_(kv_block) {
  expect_kv_block(kv_block);
  k_code_ = arena.tensor(DType::u8, {seq, heads * head_dim}, "K codes (kvi8r)");
  k_scale_ = arena.tensor(DType::f16, {heads, scale_row(seq)}, "K scales (kvi8r)");
  v_code_ = arena.tensor(DType::u8, {seq, heads * head_dim}, "V codes (kvi8r)");
  v_scale_ = arena.tensor(DType::f16, {heads, scale_row(seq)}, "V scales (kvi8r)");
}

int64_t KvI8rStore::scale_row(int64_t seq) {
  return (seq + kScaleRowAlign - 1) / kScaleRowAlign * kScaleRowAlign;
}

size_t KvI8rStore::bytes(int64_t seq, int64_t heads, int64_t head_dim) {
  return size_t(2) * size_t(heads) * (size_t(seq) * size_t(head_dim) + 2 * size_t(scale_row(seq)));
}

Tensor KvI8rStore::scales_by_key(const Tensor& head_major, int64_t seq) {
  H3S_CHECK(head_major.rank == 2 && seq <= head_major.shape[1]);
  Tensor t = head_major;
  t.shape = {seq, head_major.shape[0], 0, 0};
  t.stride = {1, head_major.stride[0], 0, 0};
  return t;
}

KvI8View KvI8rStore::view() const {
  return {k_code_.view, scales_by_key(k_scale_.view, seq_), v_code_.view,
          scales_by_key(v_scale_.view, seq_)};
}

void KvI8rStore::write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) {
  const KvI8View kv = view();
  backend.kvi8r_quantize(k, kv.k_code.rows_view(rows.begin, rows.end),
                         kv.k_scale.rows_view(rows.begin, rows.end));
  backend.kvi8r_quantize(v, kv.v_code.rows_view(rows.begin, rows.end),
                         kv.v_scale.rows_view(rows.begin, rows.end));
}

void KvI8rStore::attend(Backend& backend, std::span<const QueryChunk> chunks) {
  const KvI8View kv = view();
  attend_in_blocks(backend, chunks, seq_, kv_block_, true,
                   [&](const Tensor& q, RowRange keys, AttnState& s) {
                     backend.attention_kvi8r(q, kv, keys, s);
                   });
}

void KvI8rStore::finish(Backend& backend, const AttnState& state, const Tensor& out) {
  backend.attn_state_finish_rotated(state, out);
}

}  // namespace h3s
