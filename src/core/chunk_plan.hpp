// ChunkPlan: how a sequence of rows is cut into chunks.
//
// Exactness never depends on the plan (every op is row-invariant); the plan
// only trades peak memory against per-call overhead.
#pragma once

#include <cstdint>
#include <vector>

namespace h3s {

struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const RowRange&) const = default;
};

struct ChunkPlan {
  std::vector<RowRange> chunks;

  // Chunks of `chunk` rows; a tail shorter than `merge_tail_below` rows is
  // merged into the previous chunk (the reference node uses 512 to avoid tiny
  // tail calls). chunk <= 0 or chunk >= rows gives one chunk.
  static ChunkPlan fixed(int64_t rows, int64_t chunk, int64_t merge_tail_below = 0);

  // ceil(rows / max_chunk) chunks whose sizes differ by at most one row, the
  // larger ones first. max_chunk <= 0 gives one chunk.
  static ChunkPlan balanced(int64_t rows, int64_t max_chunk);

  int64_t rows() const { return chunks.empty() ? 0 : chunks.back().end; }
  int64_t largest() const;
};

}  // namespace h3s
