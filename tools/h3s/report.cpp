// Formatting of run results.
#include "report.hpp"

#include <fmt/format.h>

#include <map>

namespace h3s::cli {

std::string layout_summary(const PackedLayout& l) {
  return fmt::format("{} tokens (text {} | cond {} | audio {} | video {}), {} timesteps", l.seq_len,
                     l.rows_of(SegmentKind::text), l.rows_of(SegmentKind::cond),
                     l.rows_of(SegmentKind::audio), l.rows_of(SegmentKind::video),
                     l.timesteps.size());
}

nlohmann::json ledger_json(const std::vector<LedgerEntry>& ledger) {
  nlohmann::json out = nlohmann::json::array();
  for (const LedgerEntry& e : ledger)
    out.push_back({{"block", e.block},
                   {"phase", std::string(phase_name(e.phase))},
                   {"allocated_at_start", e.allocated_at_start},
                   {"peak", e.peak},
                   {"allocated_at_end", e.allocated_at_end}});
  return out;
}

nlohmann::json phase_peaks(const std::vector<LedgerEntry>& ledger) {
  std::map<std::string, size_t> peaks;
  for (const LedgerEntry& e : ledger) {
    size_t& p = peaks[std::string(phase_name(e.phase))];
    p = std::max(p, e.peak);
  }
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [k, v] : peaks) out[k] = v;
  return out;
}

void print_ledger_table(const std::vector<LedgerEntry>& ledger) {
  fmt::print("  {:>6} {:>8} {:>14} {:>14} {:>14}\n", "block", "phase", "live at start", "peak",
             "live at end");
  for (const LedgerEntry& e : ledger) {
    if (e.peak == 0 && e.allocated_at_start == 0) continue;
    fmt::print("  {:>6} {:>8} {:>14} {:>14} {:>14}\n",
               e.block < 0 ? std::string("-") : std::to_string(e.block), phase_name(e.phase),
               format_bytes(e.allocated_at_start), format_bytes(e.peak),
               format_bytes(e.allocated_at_end));
  }
}

}  // namespace h3s::cli
