// `h3s bench`: one DiT block of a preset, stock vs streamed, at several
// sequence lengths: seconds, attention TFLOP/s, arena peak above the inputs,
// bit-equality. One JSON line per length with --json.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli_args.hpp"

namespace h3s::cli {

struct BenchArgs {
  RunArgs run;  // model, format, backend, controls
  std::vector<int64_t> token_list{32768};
  int reps = 1;
  bool skip_stock = false;
  bool skip_attention = false;
  bool only_attention = false;
  bool phase_times = false;  // synchronise at the streamed block's phase starts, report each
  std::vector<std::string> attn_kernels;  // extra attention kernels to time (H3S_ATTN_KERNEL names)
};
void add_bench_flags(CLI::App& cmd, BenchArgs& a);
int run_bench(BenchArgs& a);

}  // namespace h3s::cli
