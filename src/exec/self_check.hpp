// self_check: on block 0, run the stock block and the streamed block side by
// side for the variants full / q only / kv only / mlp only / none and report
// the divergence as one log line. The verdict compares bits (so -0 vs +0 and
// two different NaN payloads diverge); ulps only measure how far. With an
// approximate K/V tier every run uses that tier (and its exact_av_rows), so
// the verdict is the tier's chunk invariance, and the line adds the tier's
// error against the exact store (both stock blocks, same input), labelled
// approximate.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "exec/block.hpp"

namespace h3s {

struct SelfCheckResult {
  struct Variant {
    std::string name;
    int64_t max_ulp = 0;
    double mean_ulp = 0.0;
    int64_t differing = 0;  // values whose bits differ from the stock run's
  };
  std::vector<Variant> variants;
  // An approximate tier that ran: its stock block against the exact store's.
  struct TierError {
    KvTier store = KvTier::bf16;
    double rel_rms = 0.0;  // sqrt(sum (tier - exact)^2 / sum exact^2) over the block's output
    double max_abs = 0.0;
  };
  std::optional<TierError> tier;
  // An approximate tier asked for that this backend has no kernel for: the
  // exact store ran (that tier; empty otherwise).
  std::optional<KvTier> tier_fallback;
  // True when no variant has a single differing bit.
  bool all_equal() const;
  std::string line(int64_t tokens) const;
};

// exact_rows: the query rows attended over the exact K/V beside an
// approximate store (BlockKv::exact_rows), as the checked forward runs them;
// mix_heads: kvmix's heads on 8 bits (BlockKv::mix_heads).
SelfCheckResult self_check_block(Backend& be, Arena& arena, const BlockView& block, const Tensor& x,
                                 const ExecOptions& options,
                                 std::span<const RowRange> exact_rows = {},
                                 std::span<const int> mix_heads = {});

// One variant's comparison of bf16 bits `got` against `ref` (same length).
SelfCheckResult::Variant compare_bf16_bits(std::string name, std::span<const uint16_t> ref,
                                           std::span<const uint16_t> got);

// Distance between two bf16 values in units in the last place: +0 and -0 are
// 0 apart (the bit verdict still tells them apart), two NaNs 0, NaN vs
// anything else the largest distance.
int64_t bf16_ulp_distance(uint16_t a, uint16_t b);

}  // namespace h3s
