// `h3s bench`: one DiT block of a preset, stock vs streamed, at several
// sequence lengths: seconds, attention TFLOP/s, arena peak above the inputs,
// bit-equality. One JSON line per length with --json.
//
// Exit codes: 0 when every comparison made found the same bits (or none was
// made: --skip-stock, --only-attention; bit_equal is null then), 3 when a
// comparison found different bits (every length still runs and prints),
// 2 for bad input, 1 for any other error.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "cli_args.hpp"

namespace h3s::cli {

// run_bench's exit code when the streamed block's bits differ from the stock block's.
inline constexpr int kExitBitsDiffer = 3;

struct BenchArgs {
  RunArgs run;  // model, format, backend, controls
  std::vector<int64_t> token_list{32768};
  int reps = 1;
  bool skip_stock = false;
  bool skip_attention = false;
  bool only_attention = false;
  bool phase_times = false;  // synchronise at the streamed block's phase starts, report each
  // --attn-kernels: attention alone again on these requests (--attn-kernel names)
  std::vector<std::string> attn_kernels;
  // TEST ONLY (tests/cli, the hidden flag --test-flip-streamed-bit): flips the
  // lowest bit of the streamed block's first output value before the
  // comparison, so that a test sees a real mismatch reported and exit 3. No
  // user run sets it.
  bool test_flip_streamed_bit = false;
};
void add_bench_flags(CLI::App& cmd, BenchArgs& a);
int run_bench(BenchArgs& a);

}  // namespace h3s::cli
