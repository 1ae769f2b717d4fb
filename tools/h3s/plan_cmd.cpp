// `h3s plan` (see plan_cmd.hpp). With --checkpoint the budget covers the
// weights too (the file is mapped, not read: planning costs no copy); with a
// preset it covers the activations alone (no weights are built).
#include "plan_cmd.hpp"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "exec/placement.hpp"
#include "exec/weight_feed.hpp"
#include "model/checkpoint.hpp"

namespace h3s::cli {

void add_plan_flags(CLI::App& cmd, RunArgs& a) {
  add_run_flags(cmd, a);
  // The plan is the device's (--vram-budget: weights and activations);
  // --memory-budget bounds a run's activation arena, which plan does not
  // model, so taking it silently would answer another question.
  cmd.get_option("--memory-budget")
      ->check(CLI::Validator(
          [](std::string&) -> std::string {
            return "h3s plan plans --vram-budget (the device's weights and activations), not "
                   "--memory-budget: give the budget as --vram-budget";
          },
          ""));
}

int run_plan(RunArgs& a) {
  a.exec.final_layer_gemm = parse_final_gemm(a.final_gemm);
  a.exec.validate();
  const size_t budget = parse_bytes(a.vram_budget, "--vram-budget");
  ModelConfig cfg;
  ModelWeights weights;
  if (!a.checkpoint.empty()) {
    weights = load_checkpoint(a.checkpoint);
    cfg = weights.config;
  } else {
    cfg = config_from(a);
  }
  const PackedLayout layout = layout_from(a, cfg);
  const size_t host_budget =
      a.exec.host_budget != 0 ? size_t(a.exec.host_budget) : available_host_memory() / 10 * 9;
  // The GPU's scratch (the most a backend takes): the plan is for the device,
  // the decode blocks of kvfp4s (Hopper's, the larger) and kvi8r (GPUs
  // without its Hopper kernel) included.
  ScratchModel scratch{};
  scratch.kv_decode_keys = most_kv_decode_keys(a.exec.kv_store);
  nlohmann::json j = {{"command", "plan"},
                      {"preset", cfg.name},
                      {"tokens", layout.seq_len},
                      {"vram_budget", budget},
                      {"host_budget", host_budget}};
  size_t activation_budget = budget;
  std::string weights_line = "weights not counted (no --checkpoint)";
  if (!a.checkpoint.empty()) {
    auto cpu = make_cpu_backend(1);  // copy sizes are the device's (weight_feed.hpp)
    const WeightPlan all = plan_weights(*cpu, weights, 0);
    const size_t least = all.extras_bytes + all.block_bytes;
    if (budget != 0 && budget <= least)
      fail(ErrorKind::out_of_memory,
           "--vram-budget {} cannot hold the weights a forward must hold at once (non-block "
           "weights {} and one block {})",
           format_bytes(budget), format_bytes(all.extras_bytes), format_bytes(all.block_bytes));
    activation_budget = budget == 0 ? 0 : budget - least;
    j["weights_model_bytes"] = all.model_bytes;
    j["weights_least_bytes"] = least;
    weights_line = fmt::format("weights {} (at least {} held: non-block {} + one block {})",
                               format_bytes(all.model_bytes), format_bytes(least),
                               format_bytes(all.extras_bytes), format_bytes(all.block_bytes));
  }
  const Placement smallest = smallest_placement(cfg, layout, a.exec, scratch);
  j["smallest_activation_bytes"] = smallest.device_peak;
  const Placement p = plan_placement(cfg, layout, a.exec, activation_budget, host_budget, scratch);
  j["placement"] = p.describe();
  j["kv"] = p.kv_on_host ? "host-staged" : "device";
  j["x"] = p.x_on_host ? "host-staged" : "device";
  j["x_to_device_bytes_per_block"] = p.x_to_device_per_block;
  j["x_to_host_bytes_per_block"] = p.x_to_host_per_block;
  j["kv_block"] = p.kv_block;
  j["q_group"] = p.q_group;
  j["kv_first_pass"] = p.kv_first_pass;
  j["predicted_peak_bytes"] = p.device_peak;
  j["predicted_phase_peaks"] = {{"embed", p.embed_peak},
                                {"kv", p.kv_peak},
                                {"attn", p.attn_peak},
                                {"mlp", p.mlp_peak},
                                {"final", p.final_peak}};
  j["host_bytes"] = p.host_bytes;
  j["kv_to_host_bytes_per_block"] = p.kv_to_host_per_block;
  j["kv_to_device_bytes_per_block"] = p.kv_to_device_per_block;
  if (a.json) {
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("h3s plan: {} tokens, {}\n", layout.seq_len, weights_line);
  fmt::print("  fits: {}\n", p.describe());
  fmt::print("  smallest placement: {} of activations\n", format_bytes(smallest.device_peak));
  if (p.kv_on_host)
    fmt::print("  per block: {} to the host, {} back (K/V {} / {}, residual x {} / {})\n",
               format_bytes(p.kv_to_host_per_block + p.x_to_host_per_block),
               format_bytes(p.kv_to_device_per_block + p.x_to_device_per_block),
               format_bytes(p.kv_to_host_per_block), format_bytes(p.kv_to_device_per_block),
               format_bytes(p.x_to_host_per_block), format_bytes(p.x_to_device_per_block));
  return 0;
}

}  // namespace h3s::cli
