// KvFp4sStore: the kvfp4s tier (kvfmt/kvfp4s.hpp), resident: K rotated and
// centred per 256-token stat block, K and V as NVFP4 (e2m1 codes, an e4m3
// scale per 16 elements, an fp32 global per block and head), ~0.57 bytes an
// element instead of 2. Approximate: its error against the exact store is
// measured (h3s kvbench, docs/PERFORMANCE.md), and its streamed block equals
// its own stock block bit for bit.
//
// Stat blocks sit at absolute token positions, but phase 1 writes chunks of
// any size: a chunk's rows past its last whole block are kept (in bf16, at
// most 255 rows) and quantised with the next chunk's first rows. Writes come
// in sequence order, as both executors make them.
#pragma once

#include "kv/kv_store.hpp"
#include "kv/open_block.hpp"

namespace h3s {

class KvFp4sStore final : public KvStore {
 public:
  // kv_block must be 0 or a multiple of kAttnKvTile (throws naming the fix).
  KvFp4sStore(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim, int64_t kv_block);
  std::string_view name() const override { return kv_tier_name(KvTier::kvfp4s); }
  bool exact() const override { return false; }
  void write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) override;
  // Rotates each chunk's queries in place, then attends block by block.
  void attend(Backend& backend, std::span<const QueryChunk> chunks) override;
  KvFp4sView view() const;
  // Device bytes of the store for `seq` rows (the kept tail included).
  static size_t bytes(int64_t seq, int64_t heads, int64_t head_dim);

 private:
  int64_t seq_, kv_block_;
  OwnedTensor k_code_, k_scale_, k_global_, k_mean_, v_code_, v_scale_, v_global_;
  OpenBlock open_;  // the chunk rows of a block not yet whole
};

}  // namespace h3s
