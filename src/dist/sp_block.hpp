// The sequence-parallel block: one DiT (or refiner) block run by every rank
// of a Communicator, each holding only its rows of the residual x. Norms,
// projections and the MLP run on the rank's own rows (row-invariant ops), in
// row chunks like the streamed block's phases (SpOptions); attention is split
// across ranks in one of three ways (SpAttention). Every rank calls the same
// backend ops on its share as the stock and streamed blocks call on the whole
// sequence, so the result is the one-rank block's bit for bit (docs/DESIGN.md
// "Multi-GPU"), for any number of ranks and any chunk sizes.
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

// Chunk sizes, in StreamChunks' order (0: one chunk), bound what a rank
// holds beside its rows of x and the buffer its attention scheme needs whole
// (Ulysses: Q, K, V of its heads for every row; kv_gather: every row's K/V;
// ring: its shard's K/V), as StreamChunks bound the streamed block's.
// Exactness never depends on them.
struct SpOptions {
  SpAttention attention = SpAttention::ulysses;
  // Query rows attended at once, with their Q and fp32 state. Ulysses: chunks
  // of the whole sequence (its heads), then one all-to-all back per q_chunk
  // of the rank's rows, each followed by its out-projection and residual;
  // kv_gather: chunks of the rank's rows, Q made per chunk. The ring's
  // travelling chunks are ring_q_chunk's.
  int64_t q_chunk = 0;
  // Rows of one K/V projection (norm1 + mod -> K|V -> k norm + RoPE) of the
  // rank's rows. Ulysses projects Q, K and V together and sends each chunk
  // on as it is made: one all-to-all per chunk (the same bytes in all).
  int64_t kv_chunk = 0;
  // Rows of one MLP call (norm2 + mod -> fc1 -> SwiGLU -> fc2 -> residual).
  int64_t mlp_chunk = 0;
  // Ring only: most rows of one travelling query chunk (0: a rank's rows as
  // one chunk). Smaller chunks shorten the pipeline's fill and drain, and
  // bound the Q, state and output a rank holds (each made or finished at
  // its rank when the chunk enters or comes home).
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
