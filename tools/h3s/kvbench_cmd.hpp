// `h3s kvbench`: an approximate K/V tier's attention against the exact
// attention on fixed synthetic inputs (issue 12's accuracy harness), beside
// the plain recipe the tier improves on (its baseline, computed here on the
// host from the same definitions with the rotation turned off): relative
// rms and cosine over all outputs, and the store's bytes per element; on
// the GPU also the attention's time against the exact kernel's. Inputs:
// synthetic (gaussian, outlier) and a checkpoint block's real q, k, v.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "h3s/kv_tier.hpp"
#include "h3s/options.hpp"

namespace h3s::cli {

struct KvBenchArgs {
  KvTier kv_store = KvTier::kvi8s;
  std::string backend = "cpu";
  int64_t tokens = 2048;
  int64_t heads = 56;
  std::vector<std::string> inputs{"gaussian", "outlier"};  // and/or "checkpoint"
  std::string checkpoint;  // --checkpoint: also a block's q, k, v from a forward of this file
  int64_t block = 0;       // --block: that block
  uint64_t seed = 1;
  int threads = 0;
  bool baseline = true;  // --no-baseline: skip the host baseline (O(tokens^2) on the CPU)
  int repeat = 1;        // --repeat: attention runs timed per kernel (the median reported)
  bool json = false;
  std::vector<int> kv_mix_heads;  // kvmix: given heads on 8 bits (empty: calibrated per input)
  int64_t kv_mix_count = 0;       // kvmix: heads the calibration picks (0: half)
  AttnKernel attn_kernel = AttnKernel::automatic;  // --attn-kernel: the CUDA kernels timed
};
void add_kvbench_flags(CLI::App& cmd, KvBenchArgs& a);
int run_kvbench(const KvBenchArgs& a);

}  // namespace h3s::cli
