// KvStore: where phase 1 of a streamed block leaves K and V for the whole
// sequence, and how phase 2 attends against them. One implementation per
// storage tier and placement: the exact bf16 tier resident on the device
// (kv_bf16.hpp) or staged in host memory (kv_staged.hpp).
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <string_view>

#include "backend/backend.hpp"
#include "h3s/kv_tier.hpp"

namespace h3s {

// One query chunk of phase 2: its queries [rows, heads * head_dim] (RoPE
// applied; a store may transform them in place, e.g. kvi8r's Hadamard
// rotation) and its (reset) online-softmax state.
struct QueryChunk {
  Tensor q;
  AttnState* state = nullptr;
};

class KvStore {
 public:
  virtual ~KvStore() = default;
  virtual std::string_view name() const = 0;
  virtual bool exact() const = 0;
  // Phase 1: keep K and V of sequence rows `rows` (k, v: [rows, heads * 128]
  // views, e.g. columns of a QKV chunk).
  virtual void write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v) = 0;
  // The buffer the last write read k and v from. A store whose copies may
  // still be reading it when write returns (host staging) keeps it until
  // they are done; the others free it now.
  virtual void keep_source(OwnedTensor&& buffer) { buffer.reset(); }
  // Returns the kept buffer now (ops issued after this wait for its copies):
  // for a caller that needs its memory before it makes the next chunk's.
  virtual void release_source() {}
  // Phase 2 is about to start and will call attend `passes` times (one per
  // query group). A store that streams its blocks (host staging) queues the
  // first block of each pass early: now, and during the previous pass's
  // last block, so no pass waits for its first copy.
  virtual void expect_passes(int64_t passes) { (void)passes; }
  // Phase 2: run each query chunk against every stored key, in K/V blocks
  // of a fixed size counted from key 0, continuing each chunk's state. Every
  // chunk sees the same blocks in the same order whatever the grouping, so a
  // store may loop blocks outside chunks (one pass over staged K/V serves
  // the whole group) without changing a bit.
  virtual void attend(Backend& backend, std::span<const QueryChunk> chunks) = 0;
  // A chunk's attention output from its final state (a tier that attends in
  // another basis un-rotates here).
  virtual void finish(Backend& backend, const AttnState& state, const Tensor& out) {
    backend.attn_state_finish(state, out);
  }
};

// What the resident stores share. Each store's header declares the KvStore
// interface above, so their class declarations share its shape; the code they
// would repeat is here.
//
// Throws Error(invalid_argument) naming the fix unless kv_block is 0 (one
// pass) or a multiple of the kAttnKvTile-key attention tile.
void expect_kv_block(int64_t kv_block);
// Throws naming the tier unless head_dim is the `dim` its format quantises.
void expect_head_dim(KvTier tier, int64_t head_dim, int64_t dim);
// attend()'s loop: each chunk (its queries rotated first for a tier that
// attends in the rotated basis) against the `seq` keys in blocks of kv_block
// from key 0 (0: one pass), each by attend_block(q, keys, state).
template <class AttendBlock>
void attend_in_blocks(Backend& backend, std::span<const QueryChunk> chunks, int64_t seq,
                      int64_t kv_block, bool rotate, AttendBlock attend_block) {
  const int64_t step = kv_block == 0 ? std::max<int64_t>(seq, 1) : kv_block;
  for (const QueryChunk& c : chunks) {
    if (rotate) backend.rotate_heads(c.q);
    for (int64_t b = 0; b < seq; b += step)
      attend_block(c.q, RowRange{b, std::min(seq, b + step)}, *c.state);
  }
}

// The store for `tier` on `backend` (resident; kv_block as KvBf16Store; the
// table's store, kv_tier_table.hpp). A tier the backend has no kernels for
// falls back to the exact store and says so once on stderr (docs/FEATURES.md
// "K/V storage tiers": a missing kernel never fails a run). mix_heads: kvmix's
// heads on 8 bits (kvfmt/kvmix.hpp; the others on 4).
std::unique_ptr<KvStore> make_resident_kv_store(Backend& backend, Arena& arena, KvTier tier,
                                                int64_t seq, int64_t heads, int64_t head_dim,
                                                int64_t kv_block,
                                                std::span<const int> mix_heads = {});

}  // namespace h3s
