// Checkpoint commands: write synthetic ComfyUI-format files, and inspect any
// H3 checkpoint (detected config, per-layer formats, byte totals, first problem).
#include "checkpoint_cmds.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_args.hpp"
#include "cli_checks.hpp"
#include "core/arena.hpp"
#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_drawn.hpp"
#include "model/output_file.hpp"

namespace h3s::cli {

void add_make_checkpoint_flags(CLI::App& cmd, MakeCheckpointArgs& a) {
  cmd.add_option("--preset", a.preset, "model preset: tiny or h3")
      ->check(CLI::IsMember({"tiny", "h3"}))
      ->capture_default_str();
  cmd.add_option("--format", a.format, "block linear format: bf16, int8, w4a8 or nvfp4")
      ->check(CLI::IsMember({"bf16", "int8", "w4a8", "nvfp4"}))
      ->capture_default_str();
  cmd.add_option("--time-form", a.time_form, "full (time_embedder) or curve (adaln_t_table)")
      ->check(CLI::IsMember({"full", "curve"}))
      ->capture_default_str();
  cmd.add_option("--blocks", a.blocks, "number of DiT blocks (default: the preset's)")
      ->check(whole_at_least(1));
  cmd.add_option("--seed", a.seed, "seed of the synthetic weights")->capture_default_str();
  cmd.add_option("--weights", a.weights,
                 "seeded (bf16 weights made and quantised, whole model in memory) or drawn "
                 "(codes and scales drawn directly, streamed to disk: full-size files in minutes, "
                 "for timing runs)")
      ->check(CLI::IsMember({"seeded", "drawn"}))
      ->capture_default_str();
  cmd.add_option("--threads", a.threads,
                 "threads drawing --weights drawn (default: every hardware thread; the bytes "
                 "are the same for any count)")
      ->check(thread_count());
  cmd.add_option("out", a.out, "output .safetensors path")->required();
}

namespace {

// --weights drawn: streamed to disk block by block as it is drawn.
int make_drawn_checkpoint(const MakeCheckpointArgs& a, const ModelConfig& cfg,
                          const std::string& out) {
  DrawnCheckpointOptions o;
  o.threads = std::max(a.threads, 0);
  const int threads = o.threads > 0 ? o.threads : ThreadPool::hardware_threads();
  fmt::print(stderr, "h3s: drawing {} {} weights ({} blocks, seed {}, {} threads) into {}...\n",
             a.preset, a.format, cfg.blocks, a.seed, threads, out);
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // The file holds each block's tensors in runs by element size (fp32, then
  // bf16, then 1-byte codes): progress is per block and run.
  o.on_progress = [&](const DrawnProgress& p) {
    if (p.tensors.empty())
      fmt::print(stderr, "h3s: wrote all {} blocks ({:.2f} GB, {:.0f} s)\n", p.blocks,
                 double(p.bytes_done) * 1e-9, seconds());
    else
      fmt::print(stderr, "h3s: wrote block {}/{} {} ({:.2f} of {:.2f} GB, {:.0f} s)\n",
                 p.section_blocks_done, p.blocks, p.tensors, double(p.bytes_done) * 1e-9,
                 double(p.bytes) * 1e-9, seconds());
  };
  write_drawn_checkpoint(out, cfg, parse_format(a.format), a.seed,
                         {{"h3stream_preset", a.preset},
                          {"h3stream_format", a.format},
                          {"h3stream_seed", std::to_string(a.seed)},
                          {"h3stream_weights", "drawn"}},
                         o);
  fmt::print("wrote {} ({} preset, {} blocks, format {}, drawn weights) in {:.0f} s\n", a.out,
             a.preset, cfg.blocks, a.format, seconds());
  return 0;
}

}  // namespace

int run_make_checkpoint(const MakeCheckpointArgs& a) {
  RunArgs r;
  r.preset = a.preset;
  r.time_form = a.time_form;
  r.blocks = a.blocks;
  const ModelConfig cfg = config_from(r);
  const std::string out = checked_output_path(a.out, "out");  // before building the weights
  if (a.weights == "drawn") return make_drawn_checkpoint(a, cfg, out);
  if (a.threads >= 0)
    fail(ErrorKind::invalid_argument,
         "--threads sets the threads of --weights drawn; seeded weights are built on their own "
         "threads: drop --threads or add --weights drawn");
  fmt::print(stderr, "h3s: building {} {} weights ({} blocks, seed {})...\n", a.preset, a.format,
             cfg.blocks, a.seed);
  const auto start = std::chrono::steady_clock::now();
  const auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const ModelWeights w =
      ModelWeights::random(cfg, parse_format(a.format), a.seed, [&](int64_t done, int64_t total) {
        fmt::print(stderr, "h3s: built {}/{} blocks ({:.0f} s)\n", done, total, seconds());
      });
  fmt::print(stderr, "h3s: writing {}...\n", out);
  write_checkpoint(w, out,
                   {{"h3stream_preset", a.preset},
                    {"h3stream_format", a.format},
                    {"h3stream_seed", std::to_string(a.seed)}});
  fmt::print("wrote {} ({} preset, {} blocks, format {}) in {:.0f} s\n", a.out, a.preset,
             cfg.blocks, a.format, seconds());
  return 0;
}

void add_inspect_flags(CLI::App& cmd, InspectArgs& a) {
  cmd.add_option("file", a.file, "checkpoint .safetensors")->required();
  cmd.add_flag("--json", a.json, "print one JSON object");
  cmd.add_flag("--layers", a.layers, "list every linear layer with its format");
}

int run_inspect(const InspectArgs& a) {
  CheckpointSummary s;
  ModelWeights w;
  try {
    w = load_checkpoint(a.file, &s);
  } catch (const Error& e) {
    if (a.json)
      fmt::print("{}\n",
                 nlohmann::json{{"file", a.file}, {"valid", false}, {"problem", e.what()}}.dump());
    else
      fmt::print("{}: not a valid H3 checkpoint\n  first problem: {}\n", a.file, e.what());
    return 1;
  }
  const ModelConfig& c = w.config;
  std::map<std::string, std::pair<int, size_t>> by_format;  // format -> (layers, bytes)
  // An fp32 island of a quantised file is held at bf16 precision (ComfyUI's loader).
  // A layer flagged full_precision_matrix_mult is dequantised and multiplied in bf16.
  const auto held = [](const CheckpointSummary::Layer& l) {
    if (l.full_precision) return fmt::format("{} (bf16 GEMM)", format_name(l.format));
    return l.held_bf16 ? std::string("f32 (bf16 values)") : std::string(format_name(l.format));
  };
  for (const auto& l : s.linears) {
    auto& [n, b] = by_format[held(l)];
    ++n;
    b += l.bytes;
  }
  if (a.json) {
    nlohmann::json j = {{"file", a.file},
                        {"valid", true},
                        {"prefix", s.prefix},
                        {"config",
                         {{"hidden", c.hidden},
                          {"blocks", c.blocks},
                          {"refiner_blocks", c.refiner_blocks},
                          {"heads", c.heads},
                          {"head_dim", c.head_dim},
                          {"ffn", c.ffn},
                          {"text_dim", c.text_dim},
                          {"video_latent", c.video_latent},
                          {"audio_latent", c.audio_latent},
                          {"time_form", c.time_form == TimeForm::full ? "full" : "curve"},
                          {"time_dim", c.time_dim},
                          {"rope_freqs", c.rope_freqs}}},
                        {"tensor_bytes", s.tensor_bytes},
                        {"bytes_by_dtype", s.bytes_by_dtype}};
    nlohmann::json formats = nlohmann::json::object();
    for (const auto& [f, nb] : by_format) formats[f] = {{"layers", nb.first}, {"bytes", nb.second}};
    j["linear_formats"] = formats;
    if (a.layers) {
      nlohmann::json layers = nlohmann::json::array();
      for (const auto& l : s.linears)
        layers.push_back(
            {{"name", l.name},
             {"format", format_name(l.format)},
             {"held_as", l.held_bf16 || l.full_precision ? "bf16" : format_name(l.format)},
             {"full_precision_matrix_mult", l.full_precision},
             {"bytes", l.bytes}});
      j["layers"] = layers;
    }
    fmt::print("{}\n", j.dump());
    return 0;
  }
  fmt::print("{}: MiniMax-H3 checkpoint{}\n", a.file,
             s.prefix.empty() ? "" : fmt::format(" (keys prefixed '{}')", s.prefix));
  fmt::print(
      "  config: hidden {}, {} blocks, {} refiner blocks, {} heads x {}, ffn {}, text {}, "
      "video latent {}, audio latent {}, time {} ({}), rope freqs {}\n",
      c.hidden, c.blocks, c.refiner_blocks, c.heads, c.head_dim, c.ffn, c.text_dim, c.video_latent,
      c.audio_latent, c.time_form == TimeForm::full ? "full" : "curve", c.time_dim, c.rope_freqs);
  fmt::print("  linear layers by format:\n");
  for (const auto& [f, nb] : by_format)
    fmt::print("    {:<17} {:>5} layers {:>14}\n", f, nb.first, format_bytes(nb.second));
  fmt::print("  tensor bytes by dtype:\n");
  for (const auto& [d, b] : s.bytes_by_dtype) fmt::print("    {:<8} {:>14}\n", d, format_bytes(b));
  fmt::print("  total {}\n", format_bytes(s.tensor_bytes));
  if (a.layers)
    for (const auto& l : s.linears)
      fmt::print("    {:<48} {:<17} {:>12}\n", l.name, held(l), format_bytes(l.bytes));
  return 0;
}

}  // namespace h3s::cli
