// The sequence-parallel block: one DiT (or refiner) block run by every rank
// of a Communicator, each holding only its rows of the residual x. Norms,
// projections and the MLP run on the rank's own rows (row-invariant ops);
// attention is split across ranks in one of three ways (SpAttention). Every
// rank calls the same backend ops on its share as the stock block calls on
// the whole sequence, so the result is the one-rank block's bit for bit
// (DESIGN.md "Multi-GPU"), for any number of ranks.
//
// Exact bf16 K/V only (the approximate tiers have no sharded store yet).
#pragma once

#include <cstdint>

#include "dist/communicator.hpp"
#include "exec/block.hpp"

namespace h3s {

enum class SpAttention : uint8_t {
  // All-to-all to heads (split_heads): every rank attends every row for its
  // heads, then all-to-all back to rows. Moves Q, K, V and the output once.
  ulysses,
  // All-gather of K/V: every rank attends its own rows over the whole
  // sequence's K/V (held on every rank). A rank receives 2 * inner * S *
  // (N-1)/N bytes against Ulysses' 4 * inner * S/N * (N-1)/N (equal at 2
  // ranks, N/2 times as many beyond), but in one exchange that needs no Q,
  // so it can run under the Q projection, and none after the attention.
  kv_gather,
  // State-passing ring (RingPlan): K/V stay on the rank that made them, cut
  // on key tiles; query chunks and their (m, l, acc) state travel the shards
  // in key order. For K/V larger than one rank's memory.
  ring,
};

struct SpOptions {
  SpAttention attention = SpAttention::ulysses;
  // Ring only: most rows of one travelling query chunk (0: a rank's rows as
  // one chunk). Smaller chunks shorten the pipeline's fill and drain.
  int64_t ring_q_chunk = 0;
};

// The rows of the residual rank `rank` of `ranks` holds: its key shard in the
// ring (split_key_tiles), else the balanced split (split_rows).
RowRange sp_rows(SpAttention attention, int64_t seq, int ranks, int rank);

// Runs `block` on this rank: xr = rows sp_rows(...) of the residual
// [seq, hidden] bf16, updated in place. Every rank of `comm` calls it with
// the same block, seq and options. The block's RoPE table and mod runs cover
// the whole sequence (steps index them by absolute row). `be` and `arena` are
// this rank's own.
void run_block_sp(Backend& be, Arena& arena, Communicator& comm, const BlockView& block,
                  const Tensor& xr, int64_t seq, const SpOptions& options,
                  BlockPhases phases = BlockPhases::all);

}  // namespace h3s
