// attention_kvfp4s_decoded, attention_kvi8r_decoded (kv_tier_decode.hpp).
#include "backend/kv_tier_decode.hpp"

#include <algorithm>

#include "backend/op_checks.hpp"
#include "core/error.hpp"
#include "kvfmt/kvfp4s.hpp"
#include "kvfmt/kvi8r.hpp"

namespace h3s {

namespace {

constexpr int64_t kHd = kvi8r::kDim;
static_assert(kvfp4s::kDim == kHd, "both tiers decode 128-dim heads");

// The loop: decode(block keys, k, v) writes a block's K~/V~ (`dtype`) into
// scratch views, attention() consumes it with the state carried.
template <class Decode>
void attend_decoded(Backend& be, Arena& scratch, const Tensor& q_rot, int64_t kv_rows,
                    RowRange keys, AttnState& s, int64_t block_keys, DType dtype, const char* op,
                    Decode decode) {
  if (block_keys <= 0 || block_keys % kAttnKvTile != 0)
    fail(ErrorKind::invalid_argument,
         "{}: decode blocks of {} keys; give a positive multiple of the {}-key attention tile", op,
         block_keys, kAttnKvTile);
  checks::expect_attention_keys(keys, kv_rows, kAttnKvTile, op);
  const int64_t block = std::min(keys.size(), block_keys);
  if (block == 0 || s.rows == 0) return;
  // [keys, heads, 128], as attention() takes K/V.
  OwnedTensor k = scratch.tensor(dtype, {block, s.heads, kHd}, "decoded K block");
  OwnedTensor v = scratch.tensor(dtype, {block, s.heads, kHd}, "decoded V block");
  for (int64_t b = keys.begin; b < keys.end; b += block) {
    const int64_t n = std::min(block, keys.end - b);
    const KvView decoded{k.view.rows_view(0, n), v.view.rows_view(0, n)};
    decode(RowRange{b, b + n}, decoded.k, decoded.v);
    be.attention(q_rot, decoded, {0, n}, s);
  }
}

}  // namespace

void attention_kvfp4s_decoded(Backend& be, Arena& scratch, const Tensor& q_rot,
                              const KvFp4sView& kv, RowRange keys, AttnState& s,
                              int64_t block_keys) {
  attend_decoded(
      be, scratch, q_rot, kv.rows(), keys, s, block_keys, DType::bf16,
      "attention_kvfp4s (decode path)",
      [&](RowRange r, const Tensor& k, const Tensor& v) { be.kvfp4s_decode(kv, r, k, v); });
}

void attention_kvi8r_decoded(Backend& be, Arena& scratch, const Tensor& q_rot, const KvI8View& kv,
                             RowRange keys, AttnState& s, int64_t block_keys) {
  attend_decoded(
      be, scratch, q_rot, kv.rows(), keys, s, block_keys, DType::f16,
      "attention_kvi8r (decode path)",
      [&](RowRange r, const Tensor& k, const Tensor& v) { be.kvi8r_decode(kv, r, k, v); });
}

}  // namespace h3s
