// `h3s make-checkpoint` and `h3s inspect`.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace h3s::cli {

struct MakeCheckpointArgs {
  std::string preset = "tiny", format = "bf16", time_form = "full", weights = "seeded", out;
  int64_t blocks = -1;
  uint64_t seed = 1;
  int threads = -1;  // --weights drawn's threads; -1: not given (every hardware thread)
};
void add_make_checkpoint_flags(CLI::App& cmd, MakeCheckpointArgs& a);
int run_make_checkpoint(const MakeCheckpointArgs& a);

struct InspectArgs {
  std::string file;
  bool json = false;
  bool layers = false;
};
void add_inspect_flags(CLI::App& cmd, InspectArgs& a);
int run_inspect(const InspectArgs& a);

}  // namespace h3s::cli
