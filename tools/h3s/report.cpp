// Formatting of run results.
#include "report.hpp"

#include <fmt/format.h>

#include <algorithm>
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

size_t predicted_peak(const Placement& p, Phase phase) {
  switch (phase) {
    case Phase::embed:
    case Phase::refiner:
      return p.embed_peak;
    case Phase::kv:
      return p.kv_peak;
    case Phase::attn:
      return p.attn_peak;
    case Phase::mlp:
      return p.mlp_peak;
    case Phase::final:
      return p.final_peak;
    default:
      return 0;
  }
}

void print_ledger_table(const std::vector<LedgerEntry>& ledger, const Placement& placement) {
  fmt::print("  {:>6} {:>8} {:>14} {:>14} {:>14} {:>14}\n", "block", "phase", "live at start",
             "peak", "predicted", "live at end");
  for (const LedgerEntry& e : ledger) {
    if (e.peak == 0 && e.allocated_at_start == 0) continue;
    const size_t predicted = predicted_peak(placement, e.phase);
    fmt::print("  {:>6} {:>8} {:>14} {:>14} {:>14} {:>14}\n",
               e.block < 0 ? std::string("-") : std::to_string(e.block), phase_name(e.phase),
               format_bytes(e.allocated_at_start), format_bytes(e.peak),
               predicted ? format_bytes(predicted) : std::string("-"),
               format_bytes(e.allocated_at_end));
  }
}

nlohmann::json placement_json(const ForwardOutputs& f) {
  const Placement& p = f.placement;
  const StageTraffic& t = f.staging;
  return {{"placement",
           {{"streamed", p.streamed},
            {"kv", p.kv_on_host ? "host-staged" : "device"},
            {"x", p.x_on_host ? "host-staged" : "device"},
            {"kv_block", p.kv_block},
            {"q_group", p.q_group},
            {"kv_first_pass", p.kv_first_pass},
            {"embed_chunk", p.embed_chunk},
            {"final_layer_gemm", std::string(final_gemm_name(p.final_gemm))},
            {"predicted_peak_bytes", p.device_peak},
            {"predicted_phase_peaks",
             {{"embed", p.embed_peak},
              {"kv", p.kv_peak},
              {"attn", p.attn_peak},
              {"mlp", p.mlp_peak},
              {"final", p.final_peak}}},
            {"host_bytes", p.host_bytes}}},
          {"staging",
           {{"to_device_bytes", t.to_device_bytes},
            {"to_host_bytes", t.to_host_bytes},
            {"copies", t.copies},
            {"copy_seconds", t.copy_seconds},
            {"exposed_seconds", t.exposed_seconds}}}};
}

std::string staging_summary(const ForwardOutputs& f) {
  const StageTraffic& t = f.staging;
  if (t.copies == 0) return "no host staging";
  return fmt::format(
      "staged {} to the host and {} back in {} copies, {:.3f} s of copies ({:.3f} s exposed, "
      "{:.3f} s hidden under compute)",
      format_bytes(t.to_host_bytes), format_bytes(t.to_device_bytes), t.copies, t.copy_seconds,
      t.exposed_seconds, std::max(0.0, t.copy_seconds - t.exposed_seconds));
}

}  // namespace h3s::cli
