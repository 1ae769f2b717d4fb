// The kvi8s K/V tier, resident (see kv_i8s.hpp).
#include "kv/kv_i8s.hpp"

#include <algorithm>

#include "kvfmt/kvi8s.hpp"

namespace h3s {

namespace {
constexpr int64_t kTile = kvi8s::kTile;
}  // namespace

KvI8sStore::KvI8sStore(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim, int64_t kv_block)
    : seq_(seq), kv_block_(kv_block), open_(arena, KvTier::kvi8s, seq, heads * head_dim, kTile) {
  expect_kv_block(kv_block);
  expect_head_dim(KvTier::kvi8s, head_dim, kvi8s::kDim);
  const int64_t inner = heads * head_dim;
  k_code_ = arena.tensor(DType::i8, {seq, inner}, "K codes (kvi8s)");
  v_code_ =
      arena.tensor(DType::f8e4m3, {inner, kvi8s::padded_seq(seq)}, "V codes, transposed (kvi8s)");
  header_ = arena.tensor(DType::u8, {kvi8s::tiles(seq) * heads * kvi8s::kHeaderRows, kvi8s::kDim},
                         "K means and scales, V scales per tile (kvi8s)");
}

size_t KvI8sStore::bytes(int64_t seq, int64_t heads, int64_t head_dim) {
  return size_t(kvi8s::store_bytes(seq, heads)) + OpenBlock::bytes(heads * head_dim, kTile);
}

KvI8sView KvI8sStore::view() const {
  return {k_code_.view, v_code_.view, header_.view};
}

void KvI8sStore::write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) {
  open_.write(backend, rows, k, v,
              [&](std::span<const Tensor> kp, std::span<const Tensor> vp, int64_t first_row) {
                backend.kvi8s_quantize(kp, vp, first_row, view());
              });
}

void KvI8sStore::attend(Backend& backend, std::span<const QueryChunk> chunks) {
  open_.expect_complete();
  const KvI8sView kv = view();
  attend_in_blocks(backend, chunks, seq_, kv_block_, true,
                   [&](const Tensor& q, RowRange keys, AttnState& s) {
                     backend.attention_kvi8s(q, kv, keys, s);
                   });
}

}  // namespace h3s
