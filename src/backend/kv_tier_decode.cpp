// attention_kvfp4s_decoded (kv_tier_decode.hpp).
#include "backend/kv_tier_decode.hpp"

#include <algorithm>

#include "backend/op_checks.hpp"
#include "core/error.hpp"
#include "kv/kvfp4s.hpp"

namespace h3s {

void attention_kvfp4s_decoded(Backend& be, Arena& scratch, const Tensor& q_rot,
                              const KvFp4sView& kv, RowRange keys, AttnState& s,
                              int64_t block_keys) {
  const char* op = "attention_kvfp4s (decode path)";
  if (block_keys <= 0 || block_keys % kAttnKvTile != 0)
    fail(ErrorKind::invalid_argument,
         "{}: decode blocks of {} keys; give a positive multiple of the {}-key attention tile", op,
         block_keys, kAttnKvTile);
  checks::expect_attention_keys(keys, kv.rows(), kAttnKvTile, op);
  const int64_t block = std::min(keys.size(), block_keys);
  if (block == 0 || s.rows == 0) return;
  constexpr int64_t kHd = kvfp4s::kDim;
  // [keys, heads, 128], as attention() takes K/V.
  OwnedTensor k = scratch.tensor(DType::bf16, {block, s.heads, kHd}, "kvfp4s decoded K block");
  OwnedTensor v = scratch.tensor(DType::bf16, {block, s.heads, kHd}, "kvfp4s decoded V block");
  for (int64_t b = keys.begin; b < keys.end; b += block) {
    const int64_t n = std::min(block, keys.end - b);
    const KvView decoded{k.view.rows_view(0, n), v.view.rows_view(0, n)};
    be.kvfp4s_decode(kv, {b, b + n}, decoded.k, decoded.v);
    be.attention(q_rot, decoded, {0, n}, s);
  }
}

}  // namespace h3s
