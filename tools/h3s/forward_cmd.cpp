// h3s forward / h3s make-inputs (see forward_cmd.hpp).
#include "forward_cmd.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "cli_args.hpp"
#include "cli_checks.hpp"
#include "core/arena.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "h3s/engine.hpp"
#include "model/output_file.hpp"
#include "model/safetensors.hpp"

namespace h3s::cli {

namespace {

constexpr const char* kRequired[] = {"video_latent", "audio_latent", "context", "sigma"};
constexpr const char* kOptional = "cond_latent";

DType latent_dtype(const TensorEntry& e, const std::string& file) {
  if (e.dtype == "BF16") return DType::bf16;
  if (e.dtype == "F32") return DType::f32;
  fail(ErrorKind::bad_input, "{}: tensor '{}' has dtype {}, expected BF16 or F32", file, e.name,
       e.dtype);
}

ArrayRef array_of(const TensorEntry& e, const std::string& file) {
  ArrayRef a;
  a.dtype = latent_dtype(e, file);
  a.shape = e.shape;
  a.data = e.data;
  return a;
}

// FNV-1a over bytes: equal hashes, equal bits (runs in separate processes).
uint64_t fnv1a(const std::vector<std::byte>& b, uint64_t h = 1469598103934665603ull) {
  for (std::byte x : b) h = (h ^ uint64_t(x)) * 1099511628211ull;
  return h;
}

}  // namespace

void add_forward_flags(CLI::App& cmd, ForwardArgs& a) {
  cmd.add_option("--checkpoint", a.checkpoint, "ComfyUI-format H3 .safetensors checkpoint")
      ->required()
      ->check(CLI::ExistingFile);
  cmd.add_option("--inputs", a.inputs,
                 "safetensors file with video_latent [1,C,T,H,W], audio_latent [1,32,2,frames] "
                 "(BF16 or F32), context [1,L,text_dim] (BF16), sigma (F32, one value) and "
                 "optionally cond_latent [1,C,Tc,H,W] (an image-to-video keyframe)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd.add_option("--output", a.output,
                 "safetensors file to write: video and audio, the predictions in the latents' "
                 "dtypes and shapes")
      ->required();
  cmd.add_option("--backend", a.backend, "cpu (reference) or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_flag("--stock", a.stock, "run every block stock (ComfyUI's shape; the same bits)");
  cmd.add_option("--audio-scale", a.audio_scale,
                 "the sampler's audio carry (payload audio_scale): 4 when sampling the packed "
                 "latent (shift 12 / audio shift 3), 1 for none")
      ->capture_default_str();
  cmd.add_option("--seed", a.seed, "seed of the keyframe's noise augmentation (payload seed)")
      ->capture_default_str();
  cmd.add_option("--cond-noise-aug", a.cond_noise_aug,
                 "keyframe rows = aug x rows + (1 - aug) x noise (visual_cond_noise_aug)")
      ->capture_default_str();
  cmd.add_option("--threads", a.threads, "CPU threads (0 = all)")
      ->check(thread_count())
      ->capture_default_str();
  cmd.add_option("--memory-budget", a.memory_budget,
                 "activation arena budget, e.g. 8GiB (0 = unlimited)")
      ->capture_default_str();
  cmd.add_option("--vram-budget", a.vram_budget,
                 "device bytes for the forward's weights plus activations (0 = unlimited)")
      ->capture_default_str();
  add_control_flags(cmd, a.exec, a.final_gemm);
  cmd.add_flag("--json", a.json, "print one JSON object instead of the summary");
}

int run_forward_cmd(ForwardArgs& a) {
  // Every flag and the inputs file's names and dtypes before any work.
  a.exec.final_layer_gemm = parse_final_gemm(a.final_gemm);
  a.exec.vram_budget = parse_bytes(a.vram_budget, "--vram-budget");
  const size_t arena_budget = parse_bytes(a.memory_budget);
  if (a.stock) {
    const ExecOptions chosen = a.exec;
    a.exec = ExecOptions::stock();
    a.exec.vram_budget = chosen.vram_budget;
    a.exec.kv_store = chosen.kv_store;
    a.exec.exact_av_rows = chosen.exact_av_rows;
    a.exec.attn_kernel = chosen.attn_kernel;
    a.exec.gemm_kernel = chosen.gemm_kernel;
  }
  a.exec.validate();
  // Before any work: a run must not compute and then fail to write, nor write
  // over the checkpoint or the inputs it reads.
  const std::string output = checked_output_path(a.output, "--output", {a.checkpoint, a.inputs});
  const SafetensorsFile in = SafetensorsFile::open(a.inputs);
  std::set<std::string> expected(std::begin(kRequired), std::end(kRequired));
  expected.insert(kOptional);
  for (const std::string& name : in.names())
    if (!expected.count(name))
      fail(ErrorKind::bad_input,
           "{}: unexpected tensor '{}': an inputs file holds {} and optionally {}", a.inputs, name,
           fmt::join(kRequired, ", "), kOptional);
  for (const char* name : kRequired)
    if (!in.contains(name))
      fail(ErrorKind::bad_input,
           "{}: missing tensor '{}' (an inputs file holds {} and optionally {})", a.inputs, name,
           fmt::join(kRequired, ", "), kOptional);
  LatentInputs li;
  li.video_latent = array_of(in.entry("video_latent"), a.inputs);
  li.audio_latent = array_of(in.entry("audio_latent"), a.inputs);
  li.context = array_of(in.entry("context"), a.inputs);
  if (in.contains(kOptional)) li.cond_latent = array_of(in.entry(kOptional), a.inputs);
  {
    const TensorEntry& s = in.entry("sigma");
    const std::vector<float> v = in.read_as<float>("sigma", "F32");
    if (v.size() != 1)
      fail(ErrorKind::bad_input, "{}: tensor 'sigma' has {} values (shape [{}]), expected one",
           a.inputs, v.size(), fmt::join(s.shape, ", "));
    li.sigma = v[0];
  }
  li.audio_scale = a.audio_scale;
  li.seed = a.seed;
  li.visual_cond_noise_aug = a.cond_noise_aug;

  if (!a.json) fmt::print(stderr, "h3s: loading {}...\n", a.checkpoint);
  EngineSetup setup;
  setup.backend = a.backend;
  setup.threads = a.threads;
  setup.arena_budget = arena_budget;
  Engine engine = Engine::from_checkpoint(a.checkpoint, setup);
  const ModelInfo info = engine.info();
  const auto t0 = std::chrono::steady_clock::now();
  ProgressFn progress;
  if (!a.json)
    progress = [&](const std::string& stage) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      fmt::print(stderr, "h3s:   {} ({:.1f} s)\n", stage, s);
    };
  const LatentOutputs out = engine.forward(li, a.exec, progress);

  const auto dtype_text = [](DType t) { return t == DType::bf16 ? "BF16" : "F32"; };
  write_safetensors(output,
                    {{"audio", dtype_text(out.audio.dtype), out.audio.shape, out.audio.bytes},
                     {"video", dtype_text(out.video.dtype), out.video.shape, out.video.bytes}},
                    {{"format", "pt"},
                     {"h3stream", version()},
                     {"mode", a.stock ? "stock" : "streamed"},
                     {"checkpoint", a.checkpoint}});
  const std::string hash = fmt::format("{:016x}", fnv1a(out.audio.bytes, fnv1a(out.video.bytes)));
  const ForwardReport& r = out.report;
  if (a.json) {
    nlohmann::json j = {{"command", "forward"},
                        {"mode", a.stock ? "stock" : "streamed"},
                        {"format", info.format},
                        {"blocks", info.blocks},
                        {"tokens", r.tokens},
                        {"seconds", r.seconds},
                        {"arena_peak_bytes", r.arena_peak_bytes},
                        {"weights_plan", r.weights_plan},
                        {"streamed_blocks", r.streamed_blocks},
                        {"stock_blocks", r.stock_blocks},
                        {"video_shape", out.video.shape},
                        {"audio_shape", out.audio.shape},
                        {"output", a.output},
                        {"output_hash", hash},
                        {"log", r.log}};
    fmt::print("{}\n", j.dump());
  } else {
    for (const std::string& line : r.log) fmt::print("{}\n", line);
    fmt::print(
        "h3s forward ({}): {} checkpoint, {} tokens, {:.3f} s, arena peak {}, {} streamed + {} "
        "stock blocks\n  wrote {}: video [{}], audio [{}]; output hash {} (equal hashes: equal "
        "bits)\n",
        a.stock ? "stock" : "streamed", info.format, r.tokens, r.seconds,
        format_bytes(r.arena_peak_bytes), r.streamed_blocks, r.stock_blocks, a.output,
        fmt::join(out.video.shape, ", "), fmt::join(out.audio.shape, ", "), hash);
  }
  return 0;
}

void add_make_inputs_flags(CLI::App& cmd, MakeInputsArgs& a) {
  cmd.add_option("--checkpoint", a.checkpoint, "the checkpoint the inputs are for (its config)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd.add_option("--output", a.output, "inputs .safetensors file to write")->required();
  cmd.add_option("--latent-t", a.latent_t, "video latent frames")->capture_default_str();
  cmd.add_option("--latent-h", a.latent_h, "video latent height (odd is padded like ComfyUI)")
      ->capture_default_str();
  cmd.add_option("--latent-w", a.latent_w, "video latent width")->capture_default_str();
  cmd.add_option("--audio-frames", a.audio_frames, "audio latent frames")->capture_default_str();
  cmd.add_option("--text-len", a.text_len, "text tokens")->capture_default_str();
  cmd.add_option("--cond-frames", a.cond_frames,
                 "latent frames of an image-to-video keyframe (0 = none; needs even H and W)")
      ->capture_default_str();
  cmd.add_option("--sigma", a.sigma, "the step's sigma, in [0, 1]")->capture_default_str();
  cmd.add_option("--dtype", a.dtype, "latent dtype: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  cmd.add_option("--seed", a.seed, "seed of the random values")->capture_default_str();
}

int run_make_inputs(const MakeInputsArgs& a) {
  for (const auto& [v, name] : {std::pair{a.latent_t, "--latent-t"},
                                {a.latent_h, "--latent-h"},
                                {a.latent_w, "--latent-w"},
                                {a.audio_frames, "--audio-frames"},
                                {a.text_len, "--text-len"}})
    if (v < 1) fail(ErrorKind::invalid_argument, "{} = {} must be >= 1", name, v);
  if (a.cond_frames < 0)
    fail(ErrorKind::invalid_argument, "--cond-frames = {} must be >= 0", a.cond_frames);
  if (!(a.sigma >= 0.0f && a.sigma <= 1.0f))  // NaN fails too
    fail(ErrorKind::invalid_argument, "--sigma = {} must be in [0, 1]", a.sigma);
  // Latents past 2^31 elements each are not a test input anyone means; refuse
  // them by name before allocating.
  constexpr int64_t kMaxElements = int64_t(1) << 31;
  const int64_t frame = a.latent_h * a.latent_w;
  if (a.latent_h > kMaxElements / a.latent_w || a.latent_t > kMaxElements / frame)
    fail(ErrorKind::invalid_argument,
         "--latent-t {} x --latent-h {} x --latent-w {} is more than 2^31 latent positions: give "
         "smaller sizes",
         a.latent_t, a.latent_h, a.latent_w);
  const std::string output = checked_output_path(a.output, "--output", {a.checkpoint});
  const ModelInfo info = Engine::from_checkpoint(a.checkpoint).info();
  const bool bf = a.dtype == "bf16";
  Rng rng(a.seed);
  // Random values in the latent dtype, `scale` x N(0, 1).
  auto make = [&](std::vector<int64_t> shape, bool as_bf16, float scale) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    Array arr(as_bf16 ? DType::bf16 : DType::f32, std::move(shape));
    for (int64_t i = 0; i < n; ++i) {
      const float v = scale * rng.normal();
      if (as_bf16)
        arr.data<uint16_t>()[i] = f32_to_bf16(v).bits;
      else
        arr.data<float>()[i] = v;
    }
    return arr;
  };
  const int64_t hp = (a.latent_h + 1) / 2 * 2, wp = (a.latent_w + 1) / 2 * 2;
  std::vector<std::pair<std::string, Array>> t;
  t.emplace_back("video_latent",
                 make({1, info.video_latent, a.latent_t, a.latent_h, a.latent_w}, bf, 1.0f));
  t.emplace_back("audio_latent", make({1, info.audio_latent, 2, a.audio_frames}, bf, 1.0f));
  t.emplace_back("context", make({1, a.text_len, info.text_dim}, true, 0.5f));
  if (a.cond_frames > 0)
    t.emplace_back("cond_latent", make({1, info.video_latent, a.cond_frames, hp, wp}, bf, 1.0f));
  Array sigma(DType::f32, {1});
  sigma.data<float>()[0] = a.sigma;
  t.emplace_back("sigma", std::move(sigma));
  std::vector<WriteEntry> entries;
  for (const auto& [name, arr] : t)
    entries.push_back({name, arr.dtype == DType::bf16 ? "BF16" : "F32", arr.shape, arr.bytes});
  write_safetensors(output, entries, {{"format", "pt"}});
  fmt::print(
      stderr, "h3s: wrote {} (video [1, {}, {}, {}, {}], {} audio frames, {} text tokens{})\n",
      a.output, info.video_latent, a.latent_t, a.latent_h, a.latent_w, a.audio_frames, a.text_len,
      a.cond_frames ? fmt::format(", a {}-frame keyframe", a.cond_frames) : std::string());
  return 0;
}

}  // namespace h3s::cli
