// `h3s kvbench`'s synthetic inputs (kvbench_cmd.cpp's header says what
// each kind is) and the shape every attention and comparison takes from them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/thread_pool.hpp"

namespace h3s::cli::kvbench {

constexpr int64_t kHd = 128;
using Rows = std::vector<uint16_t>;  // [tokens, heads * 128] bf16 bits

// One input kind: q, k, v [tokens, heads * 128] and its shape, which the
// attention runs and the comparison take from here (a checkpoint's heads are
// its own, not --heads).
struct Inputs {
  Rows q, k, v;
  int64_t tokens = 0, heads = 0;
};

// gaussian or outlier inputs of n tokens x heads: the same values for the
// same tokens at any length and thread count.
Inputs make_inputs(const std::string& kind, int64_t n, int64_t heads, uint64_t seed,
                   ThreadPool& pool);

}  // namespace h3s::cli::kvbench
