#include <gtest/gtest.h>

#include "core/chunk_plan.hpp"

namespace h3s {
namespace {

void expect_cover(const ChunkPlan& p, int64_t rows) {
  int64_t at = 0;
  for (const RowRange& r : p.chunks) {
    EXPECT_EQ(r.begin, at);
    EXPECT_GT(r.size(), 0);
    at = r.end;
  }
  EXPECT_EQ(at, rows);
}

TEST(ChunkPlan, FixedCoversWithTail) {
  const ChunkPlan p = ChunkPlan::fixed(10, 3);
  ASSERT_EQ(p.chunks.size(), 4u);
  EXPECT_EQ(p.chunks.back(), (RowRange{9, 10}));
  expect_cover(p, 10);
}

TEST(ChunkPlan, FixedMergesShortTail) {
  const ChunkPlan p = ChunkPlan::fixed(1100, 1024, 512);
  ASSERT_EQ(p.chunks.size(), 1u);
  EXPECT_EQ(p.chunks[0], (RowRange{0, 1100}));
  const ChunkPlan q = ChunkPlan::fixed(2048 + 600, 1024, 512);
  ASSERT_EQ(q.chunks.size(), 3u);
  EXPECT_EQ(q.chunks.back().size(), 600);
}

TEST(ChunkPlan, BalancedSizesDifferByAtMostOne) {
  for (int64_t rows : {1, 7, 97, 1000, 4099}) {
    for (int64_t chunk : {1, 3, 64, 259, 5000}) {
      const ChunkPlan p = ChunkPlan::balanced(rows, chunk);
      expect_cover(p, rows);
      EXPECT_EQ(int64_t(p.chunks.size()), (rows + chunk - 1) / chunk);
      EXPECT_LE(p.largest(), chunk);
      EXPECT_LE(p.largest() - p.chunks.back().size(), 1);
    }
  }
}

TEST(ChunkPlan, ZeroChunkMeansWhole) {
  EXPECT_EQ(ChunkPlan::fixed(5, 0).chunks.size(), 1u);
  EXPECT_EQ(ChunkPlan::balanced(5, 0).chunks.size(), 1u);
  EXPECT_TRUE(ChunkPlan::fixed(0, 4).chunks.empty());
}

}  // namespace
}  // namespace h3s
