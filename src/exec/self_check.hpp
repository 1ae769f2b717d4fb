// self_check: on block 0, run the stock block and the streamed block side by
// side for the variants full / q only / kv only / mlp only / none and report
// the divergence as one log line. The verdict compares bits (so -0 vs +0 and
// two different NaN payloads diverge); ulps only measure how far.
#pragma once

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
  // True when no variant has a single differing bit.
  bool all_equal() const;
  std::string line(int64_t tokens) const;
};

SelfCheckResult self_check_block(Backend& be, Arena& arena, const BlockView& block, const Tensor& x,
                                 const ExecOptions& options);

// One variant's comparison of bf16 bits `got` against `ref` (same length).
SelfCheckResult::Variant compare_bf16_bits(std::string name, std::span<const uint16_t> ref,
                                           std::span<const uint16_t> got);

// Distance between two bf16 values in units in the last place: +0 and -0 are
// 0 apart (the bit verdict still tells them apart), two NaNs 0, NaN vs
// anything else the largest distance.
int64_t bf16_ulp_distance(uint16_t a, uint16_t b);

}  // namespace h3s
