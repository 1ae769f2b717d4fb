// The kvi8r K/V tier, resident (see kv_i8r.hpp).
#include "kv/kv_i8r.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>

#include "kv/kv_bf16.hpp"
#include "kv/kv_fp4s.hpp"
#include "kv/kv_i8s.hpp"

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

std::unique_ptr<KvStore> make_resident_kv_store(Backend& backend, Arena& arena,
                                                std::string_view tier, int64_t seq, int64_t heads,
                                                int64_t head_dim, int64_t kv_block) {
  if (tier == "kvi8r" || tier == "kvi8s" || tier == "kvfp4s") {
    if (backend.has_kv_tier(tier)) {
      if (tier == "kvi8r")
        return std::make_unique<KvI8rStore>(arena, seq, heads, head_dim, kv_block);
      if (tier == "kvfp4s")
        return std::make_unique<KvFp4sStore>(arena, seq, heads, head_dim, kv_block);
      return std::make_unique<KvI8sStore>(arena, seq, heads, head_dim, kv_block);
    }
    static bool said = false;
    if (!said) {
      said = true;
      fmt::print(stderr,
                 "h3s: the {} backend has no {} kernels yet; using the exact bf16 K/V store\n",
                 backend.name(), tier);
    }
  } else if (tier != "bf16") {
    fail(ErrorKind::invalid_argument,
         "kv_store '{}' is not a K/V tier (bf16, kvi8r, kvi8s, kvfp4s)", tier);
  }
  return std::make_unique<KvBf16Store>(arena, seq, heads, head_dim, kv_block);
}

}  // namespace h3s
