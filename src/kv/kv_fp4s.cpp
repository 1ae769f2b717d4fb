// The kvfp4s K/V tier, resident (see kv_fp4s.hpp).
#include "kv/kv_fp4s.hpp"

#include <algorithm>

#include "kvfmt/kvfp4s.hpp"

namespace h3s {

namespace {
constexpr int64_t kBlock = kvfp4s::kBlock;
}  // namespace

KvFp4sStore::KvFp4sStore(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim,
                         int64_t kv_block)
    : seq_(seq), kv_block_(kv_block), open_(arena, KvTier::kvfp4s, seq, heads * head_dim, kBlock) {
  expect_kv_block(kv_block);
  expect_head_dim(KvTier::kvfp4s, head_dim, kvfp4s::kDim);
  const int64_t inner = heads * head_dim, blocks = (seq + kBlock - 1) / kBlock;
  const int64_t code_cols = heads * (kvfp4s::kDim / 2), scale_cols = heads * kvfp4s::kGroups;
  k_code_ = arena.tensor(DType::u8, {seq, code_cols}, "K codes (kvfp4s)");
  k_scale_ = arena.tensor(DType::f8e4m3, {seq, scale_cols}, "K scales (kvfp4s)");
  k_global_ = arena.tensor(DType::f32, {blocks, heads}, "K block globals (kvfp4s)");
  k_mean_ = arena.tensor(DType::bf16, {blocks, inner}, "K block means (kvfp4s)");
  v_code_ = arena.tensor(DType::u8, {seq, code_cols}, "V codes (kvfp4s)");
  v_scale_ = arena.tensor(DType::f8e4m3, {seq, scale_cols}, "V scales (kvfp4s)");
  v_global_ = arena.tensor(DType::f32, {blocks, heads}, "V block globals (kvfp4s)");
}

size_t KvFp4sStore::bytes(int64_t seq, int64_t heads, int64_t head_dim) {
  return size_t(kvfp4s::store_bytes(seq, heads)) + OpenBlock::bytes(heads * head_dim, kBlock);
}

KvFp4sView KvFp4sStore::view() const {
  return {k_code_.view, k_scale_.view, k_global_.view, k_mean_.view,
          v_code_.view, v_scale_.view, v_global_.view};
}

void KvFp4sStore::write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) {
  open_.write(backend, rows, k, v,
              [&](std::span<const Tensor> kp, std::span<const Tensor> vp, int64_t first_row) {
                backend.kvfp4s_quantize(kp, vp, first_row, view());
              });
}

void KvFp4sStore::attend(Backend& backend, std::span<const QueryChunk> chunks) {
  open_.expect_complete();
  const KvFp4sView kv = view();
  attend_in_blocks(backend, chunks, seq_, kv_block_, true,
                   [&](const Tensor& q, RowRange keys, AttnState& s) {
                     backend.attention_kvfp4s(q, kv, keys, s);
                   });
}

}  // namespace h3s
