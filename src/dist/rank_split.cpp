// Row, head and key-shard splits and the ring plan (rank_split.hpp).
#include "dist/rank_split.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace h3s {

std::vector<RowRange> split_balanced(int64_t n, int parts) {
  if (parts < 1 || n < 0)
    fail(ErrorKind::invalid_argument, "split of {} items over {} ranks: need n >= 0, ranks >= 1", n,
         parts);
  std::vector<RowRange> out;
  out.reserve(size_t(parts));
  const int64_t base = n / parts, extra = n % parts;
  int64_t begin = 0;
  for (int64_t i = 0; i < parts; ++i) {
    const int64_t end = begin + base + (i < extra ? 1 : 0);
    out.push_back({begin, end});
    begin = end;
  }
  return out;
}

std::vector<RowRange> split_key_tiles(int64_t keys, int ranks, int64_t tile) {
  if (tile < 1) fail(ErrorKind::invalid_argument, "key shards: tile {} must be >= 1", tile);
  std::vector<RowRange> shards = split_balanced((keys + tile - 1) / tile, ranks);
  for (RowRange& s : shards) s = {std::min(keys, s.begin * tile), std::min(keys, s.end * tile)};
  return shards;
}

RingPlan RingPlan::make(int64_t seq, int ranks, int64_t q_chunk) {
  RingPlan p;
  p.shards = split_key_tiles(seq, ranks);
  for (int r = 0; r < ranks; ++r) {
    const RowRange own = p.shards[size_t(r)];
    if (own.size() == 0) continue;
    p.hops = r + 1;  // non-empty shards are a prefix of the ranks
    for (const RowRange& c : ChunkPlan::balanced(own.size(), q_chunk).chunks)
      p.chunks.push_back({.owner = r, .rows = {own.begin + c.begin, own.begin + c.end}});
  }
  return p;
}

}  // namespace h3s
