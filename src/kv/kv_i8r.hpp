// KvI8rStore: the kvi8r tier (kvfmt/kvi8r.hpp), resident. K and V rows int8
// with one fp16 scale per (token, head) in the Hadamard basis: 130 bytes per
// 128 elements instead of 256. The scales lie head-major ([heads, seq
// rounded up to kScaleRowAlign]), so a 128-key tile of one head is 256
// contiguous bytes: a warp of the Hopper kernel's converters loads its 32
// keys' scales from 2 sectors, where the [seq, heads] layout cost each key a
// 32-byte sector of its own (H200: 1.09-1.11x the exact kernel's time
// against 1.13-1.15x). Approximate: its error against the exact
// store is measured (tests/exec/test_kv_tiers.cpp, docs/PERFORMANCE.md),
// and its streamed block equals its own stock block bit for bit.
#pragma once

#include "kv/kv_store.hpp"

namespace h3s {

class KvI8rStore final : public KvStore {
 public:
  // kv_block must be 0 or a multiple of kAttnKvTile (throws naming the fix).
  KvI8rStore(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim, int64_t kv_block);
  std::string_view name() const override { return kv_tier_name(KvTier::kvi8r); }
  bool exact() const override { return false; }
  void write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) override;
  // Rotates each chunk's queries in place, then attends block by block.
  void attend(Backend& backend, std::span<const QueryChunk> chunks) override;
  void finish(Backend& backend, const AttnState& state, const Tensor& out) override;
  KvI8View view() const;
  // Device bytes of the store for `seq` rows.
  static size_t bytes(int64_t seq, int64_t heads, int64_t head_dim);
  // Keys per head row of the scale arrays: seq rounded up to 8 (16-byte
  // aligned head rows).
  static constexpr int64_t kScaleRowAlign = 8;
  static int64_t scale_row(int64_t seq);
  // A head-major [heads, scale_row(seq)] scale array as the [seq, heads]
  // view KvI8View holds (stride {1, scale_row(seq)}).
  static Tensor scales_by_key(const Tensor& head_major, int64_t seq);

 private:
  int64_t seq_, kv_block_;
  OwnedTensor k_code_, k_scale_, v_code_, v_scale_;
};

}  // namespace h3s
