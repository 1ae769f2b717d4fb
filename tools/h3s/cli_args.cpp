// Flag registration and the flags -> config / layout translation.
#include "cli_args.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "cli_checks.hpp"
#include "core/error.hpp"
#include "kvfmt/kvmix.hpp"

namespace h3s::cli {

void add_run_flags(CLI::App& cmd, RunArgs& a) {
  ExecOptions& o = a.exec;
  cmd.add_option("--preset", a.preset, "model preset: tiny or h3 (full size)")
      ->check(CLI::IsMember({"tiny", "h3"}))
      ->capture_default_str();
  cmd.add_option("--backend", a.backend, "cpu (reference) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--checkpoint", a.checkpoint,
                 "run on the weights of this ComfyUI-format H3 .safetensors file (its config and "
                 "per-layer formats replace --preset/--format/--blocks)")
      ->check(CLI::ExistingFile);
  cmd.add_option(
         "--format", a.format,
         "weight format of the block linears: bf16, int8, w4a8 or nvfp4 (dequantised to bf16)")
      ->check(CLI::IsMember({"bf16", "int8", "w4a8", "nvfp4"}))
      ->capture_default_str();
  cmd.add_option("--time-form", a.time_form,
                 "time embedding: full (time_embedder MLP) or curve (adaln_t_table lerp)")
      ->check(CLI::IsMember({"full", "curve"}))
      ->capture_default_str();
  cmd.add_option("--blocks", a.blocks, "number of DiT blocks (default: the preset's)")
      ->check(whole_at_least(1));
  cmd.add_option("--tokens", a.tokens,
                 "packed sequence length; text absorbs the remainder of whole video frames")
      ->check(whole_at_least(1));
  cmd.add_option("--frames", a.frames, "video frames (pixel space; latent_t = (frames-5)/17*5+2)")
      ->check(whole_at_least(5));
  cmd.add_option("--width", a.width, "video width in pixels (multiple of 32)");
  cmd.add_option("--height", a.height, "video height in pixels (multiple of 32)");
  cmd.add_option("--text-len", a.text_len, "text tokens (default 64 tiny, 512 h3)")
      ->check(whole_at_least(0));
  cmd.add_option("--audio-len", a.audio_len,
                 "audio latent steps, 2 rows each (default: frames at 24 fps, 40 Hz latents)")
      ->check(whole_at_least(0));
  cmd.add_option("--vision-pad-rows", a.vision_pad_rows,
                 "text rows in the middle of the text span tagged as video (per-token tag runs)")
      ->check(whole_at_least(0));
  cmd.add_flag("--cond-frame", a.cond_frame, "add a first-frame keyframe cond block");
  cmd.add_option("--sigma", a.sigma, "video sigma of the step, in (0, 1]")->capture_default_str();
  cmd.add_option("--seed", a.seed, "seed of the synthetic weights and inputs")
      ->capture_default_str();
  cmd.add_option("--threads", a.threads, "CPU threads (0 = all)")
      ->check(thread_count())
      ->capture_default_str();
  cmd.add_option("--memory-budget", a.memory_budget,
                 "activation arena budget, e.g. 8GiB or 512MiB (0 = unlimited)")
      ->capture_default_str();
  cmd.add_option("--vram-budget", a.vram_budget,
                 "device bytes for the forward's weights plus activations, e.g. 14GiB (0 = "
                 "unlimited): weights stay resident when they fit beside the activations, "
                 "otherwise they stream block by block (with prefetch when two blocks fit); "
                 "the CPU backend plans and copies the same way")
      ->capture_default_str();

  add_control_flags(cmd, o, a.final_gemm);
  cmd.add_flag("--json", a.json, "print one JSON object instead of the table");
}

void add_control_flags(CLI::App& cmd, ExecOptions& o, std::string& final_gemm) {
  cmd.add_option("--q-chunk", o.q_chunk,
                 "query rows per attention call (balanced); exact at any value")
      ->capture_default_str();
  cmd.add_option("--kv-chunk", o.kv_chunk, "rows per projection chunk while building K/V")
      ->capture_default_str();
  cmd.add_option("--mlp-chunk", o.mlp_chunk,
                 "rows per MLP chunk; 0 = the MLP over the whole sequence (the ComfyUI node's 0 "
                 "hands the MLP to the model's own module instead)")
      ->capture_default_str();
  cmd.add_option("--min-tokens", o.min_tokens, "below this packed length blocks run stock")
      ->capture_default_str();
  cmd.add_option("--kv-block", o.kv_block,
                 "K/V rows per attention pass, carried online-softmax state; with host-staged "
                 "K/V the staging tile (0 = one pass, or the planner's tile when staged; a "
                 "multiple of the 128-key attention tile)")
      ->capture_default_str();
  const std::map<std::string, KvPlacement> placements{{"auto", KvPlacement::automatic},
                                                      {"device", KvPlacement::device},
                                                      {"host", KvPlacement::host}};
  cmd.add_option("--kv-placement", o.kv_placement,
                 "where the K/V store lives: auto (on the device unless --vram-budget needs "
                 "it staged), device, or host (pinned host memory, streamed back in "
                 "--kv-block tiles); exact in every placement")
      // The mapped values are enums, which CLI11 would print as raw bytes in --help.
      ->transform(CLI::CheckedTransformer(placements).description("{auto, device, host}"))
      ->default_str("auto");
  cmd.add_option("--host-budget", o.host_budget,
                 "host bytes staging may pin, e.g. 32GiB (0 = the memory available at the "
                 "call, less a tenth); refused before any work when the staged K/V need more")
      ->transform([](const std::string& s) {
        try {
          return std::to_string(parse_bytes(s, "--host-budget"));
        } catch (const Error& e) {
          throw CLI::ValidationError(e.what());  // exit 2 with the one line
        }
      })
      ->default_str("0");
  cmd.add_option("--final-layer-chunk", o.final_layer_chunk,
                 "rows per output-head chunk (0 = stock: whole span promoted at once)")
      ->capture_default_str();
  cmd.add_option("--final-layer-gemm", final_gemm,
                 "exact: one head GEMM over the span; streamed: one per chunk (both bit-equal)")
      ->check(CLI::IsMember({"exact", "streamed"}))
      ->capture_default_str();
  cmd.add_option("--kv-store", o.kv_store,
                 "K/V storage tier: bf16 (exact), kvi8r (approximate: int8 + one fp16 scale "
                 "per row in a Hadamard basis), kvi8s (approximate: int8 K smoothed per "
                 "64-token block, fp8 V and P), kvfp4s (approximate: NVFP4 K, rotated and "
                 "centred per 256-token block, and V, ~0.57 bytes an element) or kvmix "
                 "(approximate: per head kvi8s or kvfp4s, --kv-mix-heads). On CUDA kvi8r and "
                 "kvfp4s run on every GPU, kvi8s and kvmix on compute capability 8.9 or newer "
                 "(RTX 40/50-series, L4, L40, Hopper); elsewhere the exact bf16 store runs "
                 "and says so")
      ->transform(kv_tier_names())
      ->type_name("TEXT")
      ->default_str(std::string(kv_tier_name(o.kv_store)));
  cmd.add_option_function<std::string>(
         "--kv-mix-heads", [&o](const std::string& s) { o.kv_mix_heads = kvmix::parse_heads(s); },
         "with --kv-store kvmix: the heads kept on 8 bits, e.g. \"0,5,9\" (the rest on 4; the "
         "same for every block); default: calibrated per block on its first call")
      ->type_name("LIST");
  cmd.add_option("--kv-mix-count", o.kv_mix_count,
                 "with --kv-store kvmix and no --kv-mix-heads: how many heads the calibration "
                 "keeps on 8 bits (0 = half: 28 of H3's 56)")
      ->check(whole_at_least(0))
      ->capture_default_str();
  cmd.add_flag("--exact-av-rows", o.exact_av_rows,
               "with an approximate --kv-store: text and audio query rows attend a retained "
               "exact bf16 K/V (those attention rows are the exact store's, bit for bit; "
               "+2 x tokens x 7168 x 2 bytes)");
  cmd.add_option("--merge-tail-below", o.merge_tail_below,
                 "kv/mlp tail chunks shorter than this merge into the previous chunk")
      ->capture_default_str();
  // Two flags, not CLI11's "--a,!--no-a" pair, whose help shows the negation's
  // value ({false}) as if it were the default.
  cmd.add_flag("--trim-forward", o.trim_forward,
               "release embed buffers once the packed sequence exists (the default)");
  cmd.add_flag_callback(
      "--no-trim-forward", [&o] { o.trim_forward = false; },
      "keep the text and patch embeds through the blocks (the same math, more memory)");
  cmd.add_flag("--self-check", o.self_check,
               "block 0: stock vs streamed for full/q/kv/mlp/none variants, one line in ulps");
  add_kernel_flags(cmd, o);
}

void add_kernel_flags(CLI::App& cmd, ExecOptions& o) {
  // Strings, parsed once checked: a CheckedTransformer over the enums would
  // print their raw bytes in its error.
  cmd.add_option_function<std::string>(
         "--attn-kernel", [&o](const std::string& s) { o.attn_kernel = parse_attn_kernel(s); },
         "CUDA, comparison runs: default (per tier, the kernel chosen for this GPU), sm80 (the "
         "mma.sync route other GPUs take, also on Hopper), sm90 (each tier's Hopper kernel; "
         "kvfp4s' instead of its decode path) or sm80-1slab (sm80 with the one-slab tile A100 "
         "and RTX cards run; sm80's bits); each route its own bits")
      ->check(CLI::IsMember({"default", "sm80", "sm90", "sm80-1slab"}))
      ->type_name("TEXT")
      ->default_str("default");
  cmd.add_option_function<std::string>(
         "--gemm-kernel", [&o](const std::string& s) { o.gemm_kernel = parse_gemm_kernel(s); },
         "CUDA, comparison runs: default or sm80 (what RTX 30/40 cards run: bf16 and int8 on "
         "mma.sync, W4A8 in two stages); the same bits")
      ->check(CLI::IsMember({"default", "sm80"}))
      ->type_name("TEXT")
      ->default_str("default");
}

ModelConfig config_from(const RunArgs& a) {
  ModelConfig c = ModelConfig::preset(a.preset);
  if (a.time_form == "curve") {
    c.time_form = TimeForm::curve;
    c.time_dim = 8;  // the released curve checkpoints' adaln_t_table width
  }
  if (a.blocks >= 0) c.blocks = a.blocks;
  c.validate();
  return c;
}

PackedLayout layout_from(const RunArgs& a, const ModelConfig& cfg) {
  LayoutSpec s;
  s.sigma = a.sigma;
  s.cond_first_frame = a.cond_frame;
  // Small models (the tiny preset, test checkpoints) get a small frame grid.
  const bool tiny = cfg.hidden < 2048;
  if (a.tokens > 0 && a.frames > 0)
    fail(ErrorKind::invalid_argument, "--tokens and --frames both given: use one of them");
  if (a.frames > 0) {
    if (a.width <= 0 || a.height <= 0 || a.width % 32 || a.height % 32)
      fail(ErrorKind::invalid_argument,
           "--width {} / --height {} must be positive multiples of 32 with --frames", a.width,
           a.height);
    if (a.frames < 5) fail(ErrorKind::invalid_argument, "--frames {} must be >= 5", a.frames);
    const VideoShape v{a.frames, a.width, a.height};
    s.latent_t = v.latent_t();
    s.latent_h = v.latent_h();
    s.latent_w = v.latent_w();
    s.text_len = a.text_len >= 0 ? a.text_len : (tiny ? 64 : 512);
    s.audio_t =
        a.audio_len >= 0 ? a.audio_len : int64_t(std::llround(double(a.frames) / 24.0 * 40.0));
  } else {
    // --tokens N (default: a small demo sequence): fixed frame grid, ~2% audio,
    // whole video frames, text takes the remainder.
    const int64_t n = a.tokens > 0 ? a.tokens : (tiny ? 2048 : 4096);
    s.latent_h = tiny ? 8 : 48;
    s.latent_w = tiny ? 8 : 86;
    const int64_t frame_rows = (s.latent_h / 2) * (s.latent_w / 2);
    s.audio_t = a.audio_len >= 0 ? a.audio_len : std::max<int64_t>(1, n / 100);
    const int64_t cond = a.cond_frame ? frame_rows : 0;
    const int64_t min_text = a.text_len >= 0 ? a.text_len : (tiny ? 64 : 512);
    const int64_t room = n - 2 * s.audio_t - cond - min_text;
    if (room < frame_rows)
      fail(ErrorKind::invalid_argument,
           "--tokens {} is too small for one {}-row video frame plus {} audio rows; use at least "
           "{}",
           n, frame_rows, 2 * s.audio_t, frame_rows + 2 * s.audio_t + cond + min_text);
    s.latent_t = room / frame_rows;
    s.text_len = n - 2 * s.audio_t - cond - s.latent_t * frame_rows;
  }
  if (a.vision_pad_rows > 0) {
    if (a.vision_pad_rows > s.text_len)
      fail(ErrorKind::invalid_argument, "--vision-pad-rows {} exceeds the {} text rows",
           a.vision_pad_rows, s.text_len);
    s.text_tags.assign(size_t(s.text_len), 1);
    const int64_t start = (s.text_len - a.vision_pad_rows) / 2;
    std::fill_n(s.text_tags.begin() + start, a.vision_pad_rows, uint8_t(0));
  }
  return PackedLayout::build(s, cfg);
}

size_t parse_bytes(const std::string& s, const char* flag) {
  size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(s, &pos);
  } catch (...) {
    fail(ErrorKind::invalid_argument, "{} '{}' is not a size like 8GiB or 512MiB", flag, s);
  }
  const std::string unit = s.substr(pos);
  double mul = 1;
  if (unit == "" || unit == "B")
    mul = 1;
  else if (unit == "KiB")
    mul = 1024.0;
  else if (unit == "MiB")
    mul = 1024.0 * 1024;
  else if (unit == "GiB")
    mul = 1024.0 * 1024 * 1024;
  else
    fail(ErrorKind::invalid_argument, "{} '{}': unit must be B, KiB, MiB or GiB", flag, s);
  if (v < 0) fail(ErrorKind::invalid_argument, "{} '{}' is negative", flag, s);
  return size_t(v * mul);
}

}  // namespace h3s::cli
