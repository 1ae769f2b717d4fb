// KvStagedStore: the exact bf16 tier with K and V in host staging memory
// (pinned on CUDA), for sequences whose K/V do not fit the device budget.
//
// Host layout: one row per token holding K then V, [seq, 2 * heads * 128],
// the layout of phase 1's K,V projection chunk. So a chunk crosses the bus
// as one contiguous copy each way (a strided copy of K or V alone ran at
// ~34 GB/s device-to-host on the H200), and the tiles keep it: K and V are
// column views with a row stride of 2 * heads * 128, which every attention
// kernel takes.
//
// Phase 1 copies each chunk's K and V out to host without waiting: the chunk's buffer is kept
// (keep_source) until the next chunk's, and only then does compute wait for its copies, a chunk
// later. Phase 2 streams them back in blocks of kv_block keys through two device tiles on the stage
// queue: block j + 1 crosses the bus while block j is attended, and one pass over the blocks serves
// every query chunk of the group the caller hands over (KvStore::attend), so the K/V bytes cross
// once per group, not once per query chunk. The tiles alternate across
// passes too: the next pass's first block is queued into the free tile
// while this pass attends its last one (expect_passes says whether a pass
// follows). kv_block is a multiple of the attention tile, so the blocked
// arithmetic is the single-pass arithmetic and the result equals the
// resident store's bit for bit.
#pragma once

#include "backend/stage_queue.hpp"
#include "kv/kv_store.hpp"

namespace h3s {

class KvStagedStore final : public KvStore {
 public:
  // host: an arena over the backend's staging memory; device: the activation
  // arena, for the two [kv_block, 2 * heads * head_dim] K,V tiles.
  // kv_block > 0, a multiple of kAttnKvTile (throws naming the fix).
  KvStagedStore(Arena& device, Arena& host, StageQueue& queue, int64_t seq, int64_t heads,
                int64_t head_dim, int64_t kv_block);
  std::string_view name() const override { return "bf16 host-staged"; }
  bool exact() const override { return true; }
  void write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) override;
  void keep_source(OwnedTensor&& buffer) override;
  void release_source() override;
  void expect_passes(int64_t passes) override;
  void attend(Backend& backend, std::span<const QueryChunk> chunks) override;

  // Device bytes of the two tiles; host bytes of the store.
  static size_t tile_bytes(int64_t kv_block, int64_t heads, int64_t head_dim);
  static size_t host_bytes(int64_t seq, int64_t heads, int64_t head_dim);

 private:
  void allocate_tiles();
  // Queues K/V block j into tile `slot`; the ticket of its last copy.
  StageQueue::Ticket fetch(int64_t j, int slot);
  Arena& device_;
  StageQueue& queue_;
  int64_t seq_, heads_, head_dim_, kv_block_;
  OwnedTensor kv_;        // host [seq, 2 * heads * head_dim]: K, then V
  OwnedTensor tiles_[2];  // device, the same layout, allocated by the first attend
  // The last chunk buffer handed over and the copy that last reads it.
  OwnedTensor source_;
  StageQueue::Ticket source_read_ = 0, written_ = 0;
  // Phase 2: passes still to come, the tile the next block goes to, and the
  // copy of the next pass's first block when it is already queued (else 0).
  int64_t passes_left_ = 0;
  int next_slot_ = 0;
  StageQueue::Ticket first_ready_ = 0;
};

}  // namespace h3s
