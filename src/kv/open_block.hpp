// OpenBlock: phase 1 writes for stores that quantise in blocks of `block`
// tokens at absolute positions (kvi8s: 64, kvfp4s: 256) while chunks come in
// any size. A chunk's rows past its last whole block are kept in bf16 (at
// most block - 1 rows) and handed to the quantiser with the next chunk's
// first rows, as row-wise parts. Writes come in sequence order, as both
// executors make them.
#pragma once

#include <functional>
#include <span>

#include "backend/backend.hpp"
#include "h3s/kv_tier.hpp"

namespace h3s {

class OpenBlock {
 public:
  // Quantises K/V rows [first_row, first_row + n) given as row-wise parts;
  // first_row is a block boundary and n a whole number of blocks unless the
  // rows end the sequence.
  using Quantise = std::function<void(std::span<const Tensor> k_parts,
                                      std::span<const Tensor> v_parts, int64_t first_row)>;

  // tier: the store's, for its buffers' names and errors.
  OpenBlock(Arena& arena, KvTier tier, int64_t seq, int64_t inner, int64_t block);
  void write(Backend& backend, RowRange rows, const Tensor& k, const Tensor& v,
             const Quantise& quantise);
  // Throws unless every row was written (before attending).
  void expect_complete() const;
  // Device bytes of the kept rows (both K and V).
  static size_t bytes(int64_t inner, int64_t block);

 private:
  KvTier tier_;
  int64_t seq_, block_;
  int64_t written_ = 0;          // rows handed over so far
  OwnedTensor k_tail_, v_tail_;  // rows [written_ - written_ % block, written_), bf16
};

}  // namespace h3s
