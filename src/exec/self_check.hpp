// self_check: on block 0, run the stock block and the streamed block side by
// side for the variants full / q only / kv only / mlp only / none and report
// the divergence in bf16 ulps as one log line.
#pragma once

#include <string>

#include "exec/block.hpp"

namespace h3s {

struct SelfCheckResult {
  struct Variant {
    std::string name;
    int64_t max_ulp = 0;
    double mean_ulp = 0.0;
  };
  std::vector<Variant> variants;
  bool all_equal() const;
  std::string line(int64_t tokens) const;
};

SelfCheckResult self_check_block(Backend& be, Arena& arena, const BlockView& block, const Tensor& x,
                                 const ExecOptions& options);

// Distance between two bf16 values in units in the last place (NaN vs
// anything else: the largest distance).
int64_t bf16_ulp_distance(uint16_t a, uint16_t b);

}  // namespace h3s
