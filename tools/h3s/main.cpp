// h3s: the h3stream command line.
//   h3s demo   stock and streamed forward on synthetic weights, compared bit for bit
//   h3s run    one forward (streamed or stock) with every control, ledger and timing
//   h3s forward  the model on real inputs from a file (the public API), outputs to a file
//   h3s make-inputs  an inputs file of random latents for a checkpoint
//   h3s make-checkpoint / inspect   ComfyUI-format checkpoint files
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "bench_cmd.hpp"
#include "checkpoint_cmds.hpp"
#include "cli_args.hpp"
#include "core/error.hpp"
#include "exec/forward.hpp"
#include "forward_cmd.hpp"
#include "kv/kv_tier_table.hpp"
#include "kvbench_cmd.hpp"
#include "kvfmt/kvmix.hpp"
#include "model/checkpoint.hpp"
#include "plan_cmd.hpp"
#include "report.hpp"
#include "runtime/engine_backend.hpp"

namespace h3s::cli {
namespace {

struct Prepared {
  ModelConfig config;
  PackedLayout layout;
  ModelWeights weights;
  ForwardInputs inputs;
};

Prepared prepare(RunArgs& a) {
  a.exec.final_layer_gemm = parse_final_gemm(a.final_gemm);
  a.exec.validate();
  (void)parse_bytes(a.memory_budget);  // reject a bad budget before any work
  a.exec.vram_budget = parse_bytes(a.vram_budget, "--vram-budget");
  if (a.backend == "cuda" && !cuda_built())
    EngineBackend("cuda", 0, 0, 0);  // throws the one-line "built without CUDA" error
  Prepared p;
  if (!a.checkpoint.empty()) {
    if (!a.json) fmt::print(stderr, "h3s: loading {}...\n", a.checkpoint);
    p.weights = load_checkpoint(a.checkpoint);
    p.config = p.weights.config;
    a.format = std::string(format_name(p.weights.format));
    p.layout = layout_from(a, p.config);
  } else {
    p.config = config_from(a);
    p.layout = layout_from(a, p.config);  // reject a bad shape before building weights
    if (!a.json)
      fmt::print(stderr, "h3s: building {} weights ({}, {} blocks, seed {})...\n", a.format,
                 p.config.name, p.config.blocks, a.seed);
    p.weights = ModelWeights::random(p.config, parse_format(a.format), a.seed);
  }
  p.inputs = random_inputs(p.config, p.layout, a.seed + 1);
  return p;
}

ForwardOutputs forward(const Prepared& p, const RunArgs& a, const ExecOptions& opt,
                       const char* label) {
  EngineBackend b(a.backend, 0, parse_bytes(a.memory_budget), a.threads);
  Arena& arena = b.arena();
  Backend* backend = &b.ops();
  if (!a.json) fmt::print(stderr, "h3s: {} forward over {} tokens...\n", label, p.layout.seq_len);
  const auto t0 = std::chrono::steady_clock::now();
  ProgressFn progress;
  if (!a.json && p.config.blocks > 0)
    progress = [&](const std::string& stage) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(stderr, "h3s:   {} {} ({:.1f} s)\n", label, stage, s);
    };
  return run_forward(*backend, arena, p.weights, p.layout, p.inputs, opt, progress);
}

// FNV-1a over the outputs' bits: two runs with the same hash gave the same bits
// (how runs in separate processes, e.g. resident vs streamed weights, are compared).
std::string output_hash(const ForwardOutputs& f) {
  uint64_t h = 1469598103934665603ull;
  auto eat = [&](const std::vector<float>& v) {
    const auto* b = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  eat(f.video);
  eat(f.audio);
  return fmt::format("{:016x}", h);
}

// What the forward's weight plan did (exec/weight_feed.hpp).
nlohmann::json weights_json(const ForwardOutputs& f, size_t vram_budget) {
  return {{"weights_residency", std::string(residency_name(f.weights.residency))},
          {"prefetch", f.weights.prefetch},
          {"weights_held_bytes", f.weights.held_bytes},
          {"weights_peak_bytes", f.weights_peak_bytes},
          {"activation_estimate", f.activation_estimate},
          {"vram_budget", vram_budget}};
}

// sqrt(sum (a - b)^2 / sum a^2) over all values (0 for empty or all-zero a).
double rel_rms(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(a[i]) * a[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : 0.0;
}

// kvmix's heads on 8 bits per DiT block: {"0": [heads...], ...}.
nlohmann::json kv_mix_json(const ForwardOutputs& out) {
  nlohmann::json mix = nlohmann::json::object();
  for (const auto& [block, heads] : out.kv_mix_heads) mix[std::to_string(block)] = heads;
  return mix;
}

// TEST ONLY (tests/cli, the hidden flag --test-flip-streamed-bit): flips one bit of the
// streamed output before the comparison, so the mismatch path (exit 3) is exercised.
bool demo_test_flip_streamed_bit = false;

int run_demo(RunArgs& a) {
  Prepared p = prepare(a);
  ExecOptions stock_opt = ExecOptions::stock();
  stock_opt.kv_store = a.exec.kv_store;  // the reference runs the same K/V tier
  stock_opt.exact_av_rows = a.exec.exact_av_rows;
  stock_opt.kv_mix_heads = a.exec.kv_mix_heads;
  stock_opt.kv_mix_count = a.exec.kv_mix_count;
  stock_opt.attn_kernel = a.exec.attn_kernel;  // the same kernels: the same bits
  stock_opt.gemm_kernel = a.exec.gemm_kernel;
  const ForwardOutputs stock = forward(p, a, stock_opt, "stock");
  ForwardOutputs streamed = forward(p, a, a.exec, "streamed");
  if (demo_test_flip_streamed_bit && !streamed.video.empty()) {  // TEST ONLY
    uint32_t bits = 0;
    std::memcpy(&bits, &streamed.video[0], sizeof bits);
    bits ^= 1u;
    std::memcpy(&streamed.video[0], &bits, sizeof bits);
  }
  // An approximate tier's error: its stock output against the exact store's.
  const bool approximate = !kv_tier_exact(a.exec.kv_store);
  std::pair<double, double> vs_exact{0.0, 0.0};  // video, audio rel-rms
  if (approximate) {
    ExecOptions exact_opt = ExecOptions::stock();
    exact_opt.attn_kernel = a.exec.attn_kernel;
    exact_opt.gemm_kernel = a.exec.gemm_kernel;
    const ForwardOutputs exact = forward(p, a, exact_opt, "stock, exact K/V store");
    vs_exact = {rel_rms(exact.video, stock.video), rel_rms(exact.audio, stock.audio)};
  }
  // Bits, not values: -0 vs +0 or two NaN payloads are not equal.
  const bool equal =
      stock.video.size() == streamed.video.size() && stock.audio.size() == streamed.audio.size() &&
      std::memcmp(stock.video.data(), streamed.video.data(), stock.video.size() * sizeof(float)) ==
          0 &&
      std::memcmp(stock.audio.data(), streamed.audio.data(), stock.audio.size() * sizeof(float)) ==
          0;
  if (a.json) {
    nlohmann::json j = {
        {"command", "demo"},
        {"preset", p.config.name},
        {"format", a.format},
        {"tokens", p.layout.seq_len},
        {"blocks", p.config.blocks},
        {"bit_equal", equal},
        {"approximate", approximate},
        {"stock_peak_bytes", stock.peak_bytes},
        {"streamed_peak_bytes", streamed.peak_bytes},
        {"stock_seconds", stock.seconds},
        {"streamed_seconds", streamed.seconds},
        {"streamed_blocks", streamed.streamed_blocks},
        {"weight_bytes", stock.weight_bytes},
        {"stock_phase_peaks", phase_peaks(stock.ledger)},
        {"streamed_phase_peaks", phase_peaks(streamed.ledger)},
        {"controls",
         {{"q_chunk", a.exec.q_chunk},
          {"kv_chunk", a.exec.kv_chunk},
          {"mlp_chunk", a.exec.mlp_chunk},
          {"min_tokens", a.exec.min_tokens},
          {"kv_block", a.exec.kv_block},
          {"final_layer_chunk", a.exec.final_layer_chunk},
          {"final_layer_gemm", a.final_gemm},
          {"kv_store", std::string(kv_tier_name(a.exec.kv_store))},
          {"exact_av_rows", a.exec.exact_av_rows},
          {"trim_forward", a.exec.trim_forward},
          {"attn_kernel", std::string(attn_kernel_name(a.exec.attn_kernel))},
          {"gemm_kernel", std::string(gemm_kernel_name(a.exec.gemm_kernel))}}},
        {"log", streamed.log},
    };
    // The streamed run's weight plan and placement (the stock run has no budget).
    j.update(weights_json(streamed, a.exec.vram_budget));
    j.update(placement_json(streamed));
    j["controls"]["kv_placement"] = std::string(kv_placement_name(a.exec.kv_placement));
    j["controls"]["host_budget"] = a.exec.host_budget;
    if (approximate)
      j["error_vs_exact"] = {{"video_rel_rms", vs_exact.first}, {"audio_rel_rms", vs_exact.second}};
    if (a.exec.kv_store == KvTier::kvmix) {
      // Each block's heads on 8 bits (the stock and streamed runs pick the same).
      j["kv_mix_heads"] = kv_mix_json(streamed);
      j["kv_mix_same_in_both_runs"] = stock.kv_mix_heads == streamed.kv_mix_heads;
    }
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("h3s demo: preset {}, format {}, {} blocks, {}\n", p.config.name, a.format,
               p.config.blocks, layout_summary(p.layout));
    for (const std::string& line : streamed.log) fmt::print("{}\n", line);
    fmt::print("streamed run: {}{}\n", streamed.weights.describe(),
               a.exec.vram_budget
                   ? fmt::format(" (--vram-budget {})", format_bytes(a.exec.vram_budget))
                   : "");
    fmt::print("placement: {}; {}\n", streamed.placement.describe(), staging_summary(streamed));
    fmt::print("\n  {:<10} {:>8} {:>10} {:>14}  {}\n", "run", "tokens", "seconds", "arena peak",
               "blocks");
    fmt::print("  {:<10} {:>8} {:>10.3f} {:>14}  {} stock\n", "stock", p.layout.seq_len,
               stock.seconds, format_bytes(stock.peak_bytes), stock.stock_blocks);
    fmt::print("  {:<10} {:>8} {:>10.3f} {:>14}  {} streamed, {} stock\n", "streamed",
               p.layout.seq_len, streamed.seconds, format_bytes(streamed.peak_bytes),
               streamed.streamed_blocks, streamed.stock_blocks);
    fmt::print("\n  bit-equal: {} ({} video + {} audio output values)\n", equal ? "yes" : "NO",
               stock.video.size(), stock.audio.size());
    fmt::print("  streamed peak / stock peak: {:.2f}\n",
               double(streamed.peak_bytes) / double(std::max<size_t>(stock.peak_bytes, 1)));
    if (approximate)
      fmt::print(
          "  K/V tier {} is approximate: both runs use it (bit-equal to each other); against "
          "the exact store rel-rms video {:.3g}, audio {:.3g}\n",
          kv_tier_name(a.exec.kv_store), vs_exact.first, vs_exact.second);
    for (const auto& [block, heads] : streamed.kv_mix_heads)
      fmt::print("  kvmix block {}: heads on 8 bits {}\n", block, kvmix::format_heads(heads));
  }
  if (!equal)
    fmt::print(stderr, "h3s demo: the streamed forward's bits differ from the stock forward's\n");
  return equal ? 0 : kExitBitsDiffer;
}

int run_one(RunArgs& a, bool stock_mode) {
  Prepared p = prepare(a);
  ExecOptions opt = stock_mode ? ExecOptions::stock() : a.exec;
  opt.vram_budget = a.exec.vram_budget;  // a stock forward may stream its weights too
  opt.kv_store = a.exec.kv_store;
  opt.exact_av_rows = a.exec.exact_av_rows;
  opt.kv_mix_heads = a.exec.kv_mix_heads;
  opt.kv_mix_count = a.exec.kv_mix_count;
  opt.attn_kernel = a.exec.attn_kernel;
  opt.gemm_kernel = a.exec.gemm_kernel;
  const ForwardOutputs out = forward(p, a, opt, stock_mode ? "stock" : "streamed");
  if (a.json) {
    nlohmann::json j = {{"command", "run"},
                        {"mode", stock_mode ? "stock" : "streamed"},
                        {"preset", p.config.name},
                        {"format", a.format},
                        {"tokens", p.layout.seq_len},
                        {"blocks", p.config.blocks},
                        {"seconds", out.seconds},
                        // (an approximate tier's error vs the exact store: h3s demo, h3s kvbench)
                        {"kv_store", std::string(kv_tier_name(opt.kv_store))},
                        {"exact_av_rows", opt.exact_av_rows},
                        {"approximate", !kv_tier_exact(opt.kv_store)},
                        {"peak_bytes", out.peak_bytes},
                        {"weight_bytes", out.weight_bytes},
                        {"phase_peaks", phase_peaks(out.ledger)},
                        {"ledger", ledger_json(out.ledger)},
                        {"log", out.log},
                        {"output_hash", output_hash(out)}};
    j.update(weights_json(out, opt.vram_budget));
    j.update(placement_json(out));
    if (opt.kv_store == KvTier::kvmix) j["kv_mix_heads"] = kv_mix_json(out);
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("h3s run ({}): preset {}, format {}, {} blocks, {}\n",
               stock_mode ? "stock" : "streamed", p.config.name, a.format, p.config.blocks,
               layout_summary(p.layout));
    for (const std::string& line : out.log) fmt::print("{}\n", line);
    fmt::print("  {:.3f} s, arena peak {}, weights {} ({}; weight stores peaked at {})\n",
               out.seconds, format_bytes(out.peak_bytes), format_bytes(out.weight_bytes),
               out.weights.describe(), format_bytes(out.weights_peak_bytes));
    fmt::print("  placement: {}\n  {}\n", out.placement.describe(), staging_summary(out));
    fmt::print("  output hash {} (equal hashes: equal bits)\n", output_hash(out));
    print_ledger_table(out.ledger, out.placement);
  }
  return 0;
}

}  // namespace
}  // namespace h3s::cli

int main(int argc, char** argv) {
  using namespace h3s::cli;
  CLI::App app{"h3s: exact token-chunked (streamed) MiniMax-H3 DiT blocks"};
  app.require_subcommand(1);

  RunArgs demo;
  // The demo runs the tiny model on a few thousand tokens, so its chunk
  // defaults are scaled down to make every phase actually chunk.
  demo.exec.q_chunk = 512;
  demo.exec.kv_chunk = 700;
  demo.exec.mlp_chunk = 600;
  demo.exec.min_tokens = 0;
  demo.exec.final_layer_chunk = 300;
  demo.exec.merge_tail_below = 0;
  CLI::App* demo_cmd = app.add_subcommand(
      "demo",
      "stock and streamed forward on synthetic weights; prints time, arena peak and "
      "bit-equality");
  add_run_flags(*demo_cmd, demo);
  // TEST ONLY: hidden (no group), for tests/cli's forced mismatch.
  demo_cmd
      ->add_flag("--test-flip-streamed-bit", demo_test_flip_streamed_bit,
                 "test only: flip one bit of the streamed output before the comparison")
      ->group("");
  demo_cmd->footer(
      "Exit codes: 0 when the streamed forward's bits equal the stock forward's; 3 when they "
      "differ (both still print); 2 for bad input; 1 for other errors.");

  RunArgs run;
  bool run_stock = false;
  CLI::App* run_cmd =
      app.add_subcommand("run", "one forward with the default controls; prints the ledger");
  add_run_flags(*run_cmd, run);
  run_cmd->add_flag("--stock", run_stock, "run every block stock (ComfyUI's shape)");

  BenchArgs bench;
  bench.run.preset = "h3";
  bench.run.exec.min_tokens = 0;
  CLI::App* bench_cmd = app.add_subcommand(
      "bench",
      "one DiT block, stock vs streamed, at several lengths: time, attention TFLOP/s, "
      "arena peak, bit-equality; with an approximate --kv-store also the block output's "
      "error against the exact store's stock block (rel_rms_vs_exact, max_abs_vs_exact)");
  add_bench_flags(*bench_cmd, bench);

  RunArgs plan;
  plan.preset = "h3";
  CLI::App* plan_cmd = app.add_subcommand(
      "plan",
      "will it fit? the placement, the predicted device peak per phase and the host memory "
      "for a shape and --vram-budget, before any work (no weights built)");
  add_plan_flags(*plan_cmd, plan);

  KvBenchArgs kvbench;
  CLI::App* kvbench_cmd = app.add_subcommand(
      "kvbench",
      "an approximate K/V tier's attention against the exact one on gaussian and outlier "
      "inputs (and, with --checkpoint, a real block's q, k, v), beside the recipe it improves "
      "on: rel-rms, cosine, bytes per element");
  add_kvbench_flags(*kvbench_cmd, kvbench);

  ForwardArgs fwd;
  CLI::App* forward_cmd = app.add_subcommand(
      "forward",
      "the model on real inputs (latents, text states, sigma) from a safetensors file, as "
      "ComfyUI's MiniMaxH3Model.forward; writes the predictions to a safetensors file");
  add_forward_flags(*forward_cmd, fwd);
  MakeInputsArgs make_inputs;
  CLI::App* make_inputs_cmd = app.add_subcommand(
      "make-inputs", "write an inputs file for h3s forward: random latents for a checkpoint");
  add_make_inputs_flags(*make_inputs_cmd, make_inputs);

  MakeCheckpointArgs make;
  CLI::App* make_cmd = app.add_subcommand(
      "make-checkpoint", "write synthetic weights as a ComfyUI-format H3 .safetensors file");
  add_make_checkpoint_flags(*make_cmd, make);
  InspectArgs inspect;
  CLI::App* inspect_cmd = app.add_subcommand(
      "inspect",
      "detected config, per-layer formats and byte totals of an H3 checkpoint, or its "
      "first problem");
  add_inspect_flags(*inspect_cmd, inspect);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "h3s: {}\n", e.what());
    return 2;
  }
  try {
    if (*demo_cmd) return run_demo(demo);
    if (*run_cmd) return run_one(run, run_stock);
    if (*forward_cmd) return run_forward_cmd(fwd);
    if (*make_inputs_cmd) return run_make_inputs(make_inputs);
    if (*make_cmd) return run_make_checkpoint(make);
    if (*bench_cmd) return run_bench(bench);
    if (*plan_cmd) return run_plan(plan);
    if (*kvbench_cmd) return run_kvbench(kvbench);
    if (*inspect_cmd) return run_inspect(inspect);
  } catch (const h3s::Error& e) {
    fmt::print(stderr, "h3s: {}\n", e.what());
    return e.kind() == h3s::ErrorKind::invalid_argument ? 2 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "h3s: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
