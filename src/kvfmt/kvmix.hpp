// kvmix, the mixed K/V tier (docs/FEATURES.md "K/V storage tiers"): per head, K and
// V either on kvi8s' 8-bit store or on kvfp4s' 4-bit one, by a head set
// chosen per block. This header is the tier's definition of record besides
// its two stores': a head's attention is exactly its store's, bit for bit.
//
//   head set      the heads on 8 bits, given (ExecOptions::kv_mix_heads) or
//                 calibrated on a block's first call: the `count` heads with
//                 the largest fp4 sensitivity below (ties: the lower head).
//   sample        up to kSampleBlocks kvfp4s stat blocks at absolute positions
//                 spread over the sequence (sample_windows), so the choice
//                 depends on the sequence length alone, never on chunks.
//   sensitivity   per head, from the sample's q, k, v as phase 1 and 2 make
//                 them: the logit error variance fp4 K adds, E|q|^2 E|dk|^2 /
//                 d^2 (dk = k~ - rotate(k), kvfp4s' decode of its own stat
//                 block; isotropic estimate of (q . dk / sqrt(d))^2), plus the
//                 relative energy of fp4 V's error, sum |dv|^2 / sum |v|^2. A
//                 proxy for the head's share of the attention error, cheap
//                 enough for a first call; kvbench measures the real error.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/chunk_plan.hpp"
#include "core/thread_pool.hpp"

namespace h3s::kvmix {

inline constexpr int64_t kSampleBlocks = 8;

// The sample's rows: stat blocks floor(i * blocks / kSampleBlocks) (all of
// them when there are fewer), each [256 b, min(seq, 256 b + 256)).
std::vector<RowRange> sample_windows(int64_t seq);

// Per head, the fp4 sensitivity (above) of sample rows given as bf16 bits:
// q, k, v [n, heads * 128] with rows `stride` elements apart, the windows'
// rows one after another (window w has window_rows[w] rows). Heads are
// scored in parallel on `pool` (null: this thread); each head's sums run in
// row order, so the scores do not depend on the thread count.
std::vector<double> fp4_sensitivity(const uint16_t* q, const uint16_t* k, const uint16_t* v,
                                    int64_t stride, std::span<const int64_t> window_rows,
                                    int64_t heads, ThreadPool* pool = nullptr);

// The `count` heads with the largest score, ascending (ties: the lower head).
std::vector<int> pick_8bit_heads(std::span<const double> score, int64_t count);

// Heads on 8 bits when none are given and no count is: half of them (28 of
// H3's 56).
inline int64_t default_8bit_count(int64_t heads) {
  return heads / 2;
}

// Throws naming the bad head unless every head is in [0, heads), once.
void check_heads(std::span<const int> heads8, int64_t heads);

// "0,5,9" (spaces allowed; empty: none) -> {0, 5, 9}, sorted; throws naming
// the bad item.
std::vector<int> parse_heads(std::string_view text);
std::string format_heads(std::span<const int> heads8);

}  // namespace h3s::kvmix
