// CPU GEMM kernels for y = x W^T, W row-major [N, K].
//
// Row invariance by construction: every output element is produced by the
// same fixed-order arithmetic (core/dot_f32.hpp order for floats, exact int32
// sums for int8) whatever block, thread or micro-tile computes it; rows are
// never split along K by a count that depends on M.
#pragma once

#include <cstdint>
#include <functional>

#include "core/thread_pool.hpp"

namespace h3s::cpu {

// Rows of x processed per outer step: bounds the backend's scratch (like a
// GPU kernel's shared memory) independently of the sequence length.
inline constexpr int64_t kGemmRowBlock = 64;

// Fills one row (K floats) of the fp32 operand for row index r.
using RowLoader = std::function<void(int64_t r, float* dst)>;
// Writes the finished output row block: out(r, n, value) for value = dot.
using F32Epilogue = std::function<void(int64_t r, int64_t n0, int64_t n1, const float* dots)>;

// fp32 dot-product GEMM over M rows: x rows come from load_x (already fp32),
// W is bf16 bits or fp32 [N, K]. The epilogue receives, for row r, the dots
// of columns [n0, n1).
void gemm_f32(ThreadPool& pool, int64_t m, int64_t n, int64_t k, const RowLoader& load_x,
              const uint16_t* w_bf16, const float* w_f32, const F32Epilogue& epilogue);

// int8 GEMM with exact int32 accumulation: xq [rows, K] int8 (one row block),
// W int8 [N, K]; acc_out [rows, N] int32.
void gemm_i8(ThreadPool& pool, int64_t rows, int64_t n, int64_t k, const int8_t* xq,
             const int8_t* w, int32_t* acc_out);

}  // namespace h3s::cpu
