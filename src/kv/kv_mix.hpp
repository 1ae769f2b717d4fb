// KvMixStore: the kvmix tier (kvfmt/kvmix.hpp), resident: the heads of a given
// set on a kvi8s store, the others on a kvfp4s store (28 of H3's 56 on 8
// bits: ~0.80 bytes an element). Each sub-store holds its heads contiguously:
// phase 1's K/V columns and phase 2's queries and online-softmax states are
// gathered per head set and the states scattered back, exact copies, so a
// head's attention is bit for bit its sub-store's (and kvmix's streamed
// block equals its stock block as theirs do). Approximate: its error against
// the exact store is measured (h3s kvbench, docs/PERFORMANCE.md).
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "kv/kv_store.hpp"

namespace h3s {

class KvMixStore final : public KvStore {
 public:
  // heads8: the heads on 8 bits (any order, each once, in [0, heads): throws
  // naming the bad one). kv_block as the sub-stores take it.
  KvMixStore(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim, int64_t kv_block,
             std::span<const int> heads8);
  std::string_view name() const override { return kv_tier_name(KvTier::kvmix); }
  bool exact() const override { return false; }
  void write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) override;
  // Per query chunk and head set: gathers the chunk's queries and state,
  // attends that set's store, scatters the state back.
  void attend(Backend& backend, std::span<const QueryChunk> chunks) override;
  // Device bytes of the two sub-stores for `seq` rows with `heads8` heads on
  // 8 bits (kept tails included).
  static size_t bytes(int64_t seq, int64_t heads, int64_t head_dim, int64_t heads8);
  // Device bytes the gathers of a chunk of `rows` rows hold while it is
  // written or attended: one head set at a time, the larger of the two.
  static size_t chunk_bytes(int64_t rows, int64_t heads, int64_t head_dim, int64_t heads8);

 private:
  // One head set and its store; runs: [first head, count) of consecutive
  // heads, gathered in this order.
  struct Part {
    std::vector<int> heads;
    std::vector<std::array<int64_t, 2>> runs;
    std::unique_ptr<KvStore> store;
  };
  Arena& arena_;
  int64_t heads_, head_dim_;
  std::vector<Part> parts_;  // those with heads: kvi8s first, then kvfp4s
};

}  // namespace h3s
