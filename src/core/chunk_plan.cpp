// Fixed and balanced chunk plans.
#include "core/chunk_plan.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace h3s {

ChunkPlan ChunkPlan::fixed(int64_t rows, int64_t chunk, int64_t merge_tail_below) {
  if (rows < 0) fail(ErrorKind::invalid_argument, "chunk plan: negative row count {}", rows);
  ChunkPlan p;
  if (rows == 0) return p;
  if (chunk <= 0 || chunk >= rows) {
    p.chunks.push_back({0, rows});
    return p;
  }
  for (int64_t a = 0; a < rows; a += chunk) p.chunks.push_back({a, std::min(a + chunk, rows)});
  if (p.chunks.size() > 1 && p.chunks.back().size() < merge_tail_below) {
    const int64_t end = p.chunks.back().end;
    p.chunks.pop_back();
    p.chunks.back().end = end;
  }
  return p;
}

ChunkPlan ChunkPlan::balanced(int64_t rows, int64_t max_chunk) {
  if (rows < 0) fail(ErrorKind::invalid_argument, "chunk plan: negative row count {}", rows);
  ChunkPlan p;
  if (rows == 0) return p;
  const int64_t n = max_chunk <= 0 ? 1 : (rows + max_chunk - 1) / max_chunk;
  const int64_t base = rows / n, extra = rows % n;
  int64_t a = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t len = base + (i < extra ? 1 : 0);
    p.chunks.push_back({a, a + len});
    a += len;
  }
  return p;
}

int64_t ChunkPlan::largest() const {
  int64_t m = 0;
  for (const RowRange& r : chunks) m = std::max(m, r.size());
  return m;
}

}  // namespace h3s
