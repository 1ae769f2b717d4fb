// KvBf16Store: the exact tier. K and V as bf16 [heads, seq, 128], resident in
// the arena; consumed in kv_block-row blocks (0 = one pass) with the
// online-softmax state carried between blocks, blocks aligned to the
// attention tile so blocked == single pass bit for bit.
#pragma once

#include "kv/kv_store.hpp"

namespace h3s {

class KvBf16Store final : public KvStore {
 public:
  // kv_block must be 0 or a multiple of kAttnKvTile (throws naming the fix).
  KvBf16Store(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim, int64_t kv_block);
  std::string_view name() const override { return kv_tier_name(KvTier::bf16); }
  bool exact() const override { return true; }
  void write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) override;
  void attend(Backend& backend, std::span<const QueryChunk> chunks) override;
  KvView view() const;
  // Device bytes of the store for `seq` rows (K and V).
  static size_t bytes(int64_t seq, int64_t heads, int64_t head_dim);

 private:
  int64_t seq_, heads_, head_dim_, kv_block_;
  OwnedTensor k_, v_;
};

}  // namespace h3s
