// `h3s plan`: will this forward fit? The placement planner's decisions and
// predicted peaks per phase for a shape and budget, before (and without) any
// work: the answer a user wants before a five-minute step.
#pragma once

#include <CLI/CLI.hpp>

#include "cli_args.hpp"

namespace h3s::cli {

void add_plan_flags(CLI::App& cmd, RunArgs& a);
int run_plan(RunArgs& a);

}  // namespace h3s::cli
