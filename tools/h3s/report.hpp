// Human table and JSON for forward runs.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "cli_args.hpp"
#include "exec/forward.hpp"

namespace h3s::cli {

std::string layout_summary(const PackedLayout& l);
nlohmann::json ledger_json(const std::vector<LedgerEntry>& ledger);
// Largest phase peak per phase kind over all blocks: {"kv": bytes, ...}.
nlohmann::json phase_peaks(const std::vector<LedgerEntry>& ledger);
// The ledger with each phase's predicted peak (exec/placement.hpp) beside it.
void print_ledger_table(const std::vector<LedgerEntry>& ledger, const Placement& placement);
// {"placement": decisions and predicted peaks, "staging": bytes moved each way, copy time}.
nlohmann::json placement_json(const ForwardOutputs& f);
std::string staging_summary(const ForwardOutputs& f);

}  // namespace h3s::cli
