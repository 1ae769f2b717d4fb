// KvI8sStore: the kvi8s tier (kvfmt/kvi8s.hpp), resident: int8 K smoothed by a
// per-64-token-block mean, fp8 e4m3 V (transposed) with per-tile channel
// scales, about 1.04 bytes an element instead of 2. Approximate: its error against the
// exact store is measured (tests/exec/test_kv_tiers.cpp, docs/PERFORMANCE.md),
// and its streamed block equals its own stock block bit for bit.
//
// Quantisation tiles sit at absolute token positions, but phase 1 writes
// chunks of any size: a chunk's rows past its last whole tile are kept (in
// bf16, at most 127 rows) and quantised with the next chunk's first rows.
// Writes come in sequence order, as both executors make them.
#pragma once

#include "kv/kv_store.hpp"
#include "kv/open_block.hpp"

namespace h3s {

class KvI8sStore final : public KvStore {
 public:
  // kv_block must be 0 or a multiple of kAttnKvTile (throws naming the fix).
  KvI8sStore(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim, int64_t kv_block);
  std::string_view name() const override { return kv_tier_name(KvTier::kvi8s); }
  bool exact() const override { return false; }
  void write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) override;
  // Rotates each chunk's queries in place, then attends block by block.
  void attend(Backend& backend, std::span<const QueryChunk> chunks) override;
  KvI8sView view() const;
  // Device bytes of the store for `seq` rows (the kept tail included).
  static size_t bytes(int64_t seq, int64_t heads, int64_t head_dim);

 private:
  int64_t seq_, kv_block_;
  OwnedTensor k_code_, v_code_, header_;
  OpenBlock open_;  // the chunk rows of a tile not yet whole
};

}  // namespace h3s
