// What the CPU backend's tier files share: the block-quantised tiers' input
// (kvi8s_quantize, kvfp4s_quantize: K and V rows given as row-wise parts, a
// store's kept tail, then a chunk), checked and indexed, and the loops over
// (block, head) and (head, query rows) on the thread pool.
#pragma once

#include <algorithm>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"

namespace h3s::cpu {

class KvBlockRows {
 public:
  // Rows [first_row, first_row + n) of `seq`, `cols` bf16 columns (heads x
  // head_dim); first_row a multiple of `block`, n too unless the rows end
  // the sequence (throws naming op otherwise).
  KvBlockRows(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts, int64_t cols,
              int64_t first_row, int64_t seq, int64_t block, const char* op)
      : block_(block) {
    for (auto [parts, rows] : {std::pair{k_parts, &k_}, std::pair{v_parts, &v_}})
      for (const Tensor& t : parts) {
        expect_dtype(t, DType::bf16, op, "K/V rows");
        expect_cols(t, cols, op, "K/V rows");
        expect_unit_col_stride(t, op, "K/V rows");
        for (int64_t r = 0; r < t.rows(); ++r) rows->emplace_back(&t, r);
      }
    const int64_t n = rows();
    if (int64_t(v_.size()) != n)
      fail(ErrorKind::invalid_argument, "{}: {} K rows but {} V rows", op, n, v_.size());
    if (first_row < 0 || first_row % block != 0 || first_row + n > seq ||
        (n % block != 0 && first_row + n != seq))
      fail(ErrorKind::invalid_argument,
           "{}: rows [{}, {}) of {} are not whole {}-token blocks (only the sequence's last "
           "block may be short)",
           op, first_row, first_row + n, seq, block);
  }
  int64_t rows() const { return int64_t(k_.size()); }
  int64_t blocks() const { return (rows() + block_ - 1) / block_; }
  // Block b's rows of head h ([rows, head_dim] each) into k and v; returns
  // the block's row count (the last may be short).
  int64_t copy_head(int64_t b, int64_t h, int64_t head_dim, uint16_t* k, uint16_t* v) const {
    const int64_t r0 = b * block_, n = std::min(block_, rows() - r0);
    for (int64_t t = 0; t < n; ++t) {
      const auto [kt, kr] = k_[size_t(r0 + t)];
      const auto [vt, vr] = v_[size_t(r0 + t)];
      std::copy_n(kt->row<uint16_t>(kr) + h * head_dim, head_dim, k + t * head_dim);
      std::copy_n(vt->row<uint16_t>(vr) + h * head_dim, head_dim, v + t * head_dim);
    }
    return n;
  }
  // quantise(b, h, rows, k, v) for every (block, head) on the pool, with
  // block b's `rows` rows of head h copied into k and v ([rows, head_dim]).
  template <class Quantise>
  void for_each_block_head(ThreadPool& pool, int64_t heads, int64_t head_dim,
                           Quantise quantise) const {
    pool.parallel_for(blocks() * heads, 1, [&](int64_t t0, int64_t t1) {
      std::vector<uint16_t> kb(static_cast<size_t>(block_ * head_dim)),
          vb(static_cast<size_t>(block_ * head_dim));
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t b = task / heads, h = task % heads;
        const int64_t n = copy_head(b, h, head_dim, kb.data(), vb.data());
        quantise(b, h, n, kb.data(), vb.data());
      }
    });
  }

 private:
  int64_t block_;
  std::vector<std::pair<const Tensor*, int64_t>> k_, v_;  // (part, row) of each row
};

// attend(h, r0, n, scratch) for every (head, block of up to 32 query rows
// from r0) on the pool: the rows-at-once attentions of kvi8r and kvfp4s,
// which decode each key tile once a task (one row a task decoded it per row:
// 15x the exact store's forward on the tiny model). Scratch, ~130 KiB, lives
// on the heap, one per worker.
template <class Scratch, class Attend>
void for_each_head_rows(ThreadPool& pool, int64_t heads, int64_t rows, Attend attend) {
  constexpr int64_t kRowBlock = 32;
  const int64_t row_blocks = (rows + kRowBlock - 1) / kRowBlock;
  pool.parallel_for(heads * row_blocks, 1, [&](int64_t t0, int64_t t1) {
    auto scratch = std::make_unique<Scratch>();
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task / row_blocks, r0 = task % row_blocks * kRowBlock;
      attend(h, r0, std::min(kRowBlock, rows - r0), *scratch);
    }
  });
}

}  // namespace h3s::cpu
