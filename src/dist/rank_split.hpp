// Who holds what in a sequence-parallel block: rows of the residual, heads of
// the attention and key shards of the ring per rank, and the ring's schedule
// (which query chunk each rank attends at each step). Pure arithmetic, the
// same on every rank, so ranks agree on every transfer without talking.
//
// Exactness never depends on a split: the row ops are row-invariant, a head's
// attention is computed the same way whatever heads share the call, and key
// shards start on attention tiles (docs/DESIGN.md,
// invariants 1 and 2).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.hpp"  // kAttnKvTile
#include "core/chunk_plan.hpp"

namespace h3s {

// `n` items over `parts`, in order: part i gets n / parts items, plus one
// for i < n % parts (56 over 3: 19, 19, 18). With n < parts the first n
// parts get one item each and the rest are empty.
std::vector<RowRange> split_balanced(int64_t n, int parts);

// Rows of the residual per rank (norms, projections, MLP). Every rank holds
// >= 1 row when rows >= ranks; otherwise the last ranks hold none and only
// take part in the collectives.
inline std::vector<RowRange> split_rows(int64_t rows, int ranks) {
  return split_balanced(rows, ranks);
}

// Attention heads per rank (Ulysses): uneven splits such as 19/19/18 are
// fine. With fewer heads than ranks the last ranks attend no head.
inline std::vector<RowRange> split_heads(int64_t heads, int ranks) {
  return split_balanced(heads, ranks);
}

// Key shards of the ring: whole `tile`-key tiles, balanced by tile count, so
// every shard starts on a tile boundary; the last non-empty shard ends at
// `keys` (its last tile may be partial). With fewer tiles than ranks the
// last ranks hold no keys.
std::vector<RowRange> split_key_tiles(int64_t keys, int ranks, int64_t tile = kAttnKvTile);

// The state-passing ring. Rank r holds the keys (and rows of x) of
// shards[r]; its rows are cut into query chunks that travel, with their
// online-softmax state, through the non-empty shards in key order: chunk c
// is at rank r in step c + r, so every chunk visits shards 0..hops-1 in
// order (the single-pass order of its keys) and every rank attends at most
// one chunk a step. The last hop finishes the chunk and sends its output
// rows home to their owner.
struct RingPlan {
  struct Chunk {
    int owner = 0;  // the rank whose rows these are
    RowRange rows;  // absolute rows of the sequence
  };
  std::vector<RowRange> shards;  // per rank
  std::vector<Chunk> chunks;     // in the order they enter the ring
  int hops = 0;                  // ranks with keys: 0..hops-1

  // `q_chunk`: most rows of a travelling chunk (0: a rank's rows as one).
  static RingPlan make(int64_t seq, int ranks, int64_t q_chunk);

  // Steps until the last chunk leaves the last hop (0: nothing to attend).
  int64_t steps() const { return chunks.empty() ? 0 : int64_t(chunks.size()) + hops - 1; }
  // The chunk rank `rank` attends in step `step`, or -1 for none.
  int64_t chunk_at(int rank, int64_t step) const {
    const int64_t c = step - rank;
    return rank < hops && c >= 0 && c < int64_t(chunks.size()) ? c : -1;
  }
};

}  // namespace h3s
