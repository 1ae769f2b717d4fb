// `h3s kvbench` (see kvbench_cmd.hpp). The inputs, [tokens, heads, 128] bf16:
//   gaussian  q, k, v ~ N(0, 1);
//   outlier   the same, then K channels {3, 17, 64, 100} x 20 and one offset
//             vector per head (elements ~ N(0, 4)) added to every key, V
//             channels {5, 77} x 10, each query row scaled by U[0.5, 2];
//   checkpoint  the q, k, v one DiT block of a checkpoint attends with, from
//             a real forward (kvbench_capture.hpp): the checkpoint's heads.
// The rows come in seeded 256-token blocks (make_inputs), so a run at any
// length and thread count sees the same values for the same tokens.
// Baselines: kvi8r's is per-row int8 without the Hadamard basis; kvi8s' is
// SageAttention-2's layout without it; kvfp4s' is rotated NVFP4 without the
// K mean; kvmix's is kvfp4s on every head (and kvi8s on every head is
// reported too: kvmix lies between them). Every tier runs through the
// backend's store (the CPU backend runs the definitions of record); the
// first three baselines run on the host, kvmix's through the backend.
#include "kvbench_cmd.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "cli_checks.hpp"
#include "core/dtype.hpp"
#include "core/thread_pool.hpp"
#include "exec/placement.hpp"
#include "kv/kv_mix.hpp"
#include "kv/kv_store.hpp"
#include "kvbench_baseline.hpp"
#include "kvbench_capture.hpp"
#include "kvbench_inputs.hpp"
#include "kvfmt/kvmix.hpp"
#include "runtime/engine_backend.hpp"

namespace h3s::cli {

using namespace kvbench;

namespace {

struct Attended {
  Rows out;
  // The store's attention and finish, as the backend times it: the median of
  // `runs` (one a repeat, the first one cold: it loads the kernel).
  double seconds = 0.0;
  std::vector<double> runs;
};

// Attention through the backend: the exact store's kernel, or `tier`'s store,
// `repeat` times over the same store, each from a fresh softmax state.
Attended backend_attention(Backend& be, Arena& arena, const Inputs& in, KvTier tier,
                           std::span<const int> mix_heads = {}, int repeat = 1) {
  const int64_t n = in.tokens, heads = in.heads, inner = heads * kHd;
  auto upload = [&](const Rows& host, const char* what) {
    OwnedTensor t = arena.tensor(DType::bf16, {n, inner}, what);
    be.upload(host.data(), t.view);
    return t;
  };
  OwnedTensor q = upload(in.q, "kvbench q"), k = upload(in.k, "kvbench k"),
              v = upload(in.v, "kvbench v");
  OwnedTensor out = arena.tensor(DType::bf16, {n, inner}, "kvbench out");
  AttnState s = AttnState::allocate(arena, n, heads, kHd);
  std::unique_ptr<KvStore> store =
      make_resident_kv_store(be, arena, tier, n, heads, kHd, 0, mix_heads);
  store->write(be, {0, n}, k.view, v.view);
  const QueryChunk c{q.view, &s};
  Attended a;
  for (int r = 0; r < repeat; ++r) {
    // The rotated tiers rotate their query chunk in place: every run gets the inputs' q.
    if (r > 0) be.upload(in.q.data(), q.view);
    be.attn_state_reset(s);
    a.runs.push_back(be.device_seconds([&] {
      store->attend(be, {&c, 1});
      store->finish(be, s, out.view);
    }));
  }
  std::vector<double> sorted = a.runs;
  std::sort(sorted.begin(), sorted.end());
  const size_t mid = sorted.size() / 2;
  a.seconds = sorted.size() % 2 ? sorted[mid] : 0.5 * (sorted[mid - 1] + sorted[mid]);
  a.out.resize(size_t(n * inner));
  be.download(out.view, a.out.data());
  be.synchronize();
  return a;
}

// kvmix's calibration on these inputs (kvfmt/kvmix.hpp): its sample windows'
// rows, scored on the host.
std::vector<int> calibrate_mix(const Inputs& in, int64_t count, ThreadPool& pool) {
  const int64_t inner = in.heads * kHd;
  Rows q, k, v;
  std::vector<int64_t> window_rows;
  for (const RowRange& r : kvmix::sample_windows(in.tokens)) {
    const auto at = [&](const Rows& t, int64_t row) { return t.begin() + row * inner; };
    q.insert(q.end(), at(in.q, r.begin), at(in.q, r.end));
    k.insert(k.end(), at(in.k, r.begin), at(in.k, r.end));
    v.insert(v.end(), at(in.v, r.begin), at(in.v, r.end));
    window_rows.push_back(r.size());
  }
  const std::vector<double> score =
      kvmix::fp4_sensitivity(q.data(), k.data(), v.data(), inner, window_rows, in.heads, &pool);
  return kvmix::pick_8bit_heads(score, count);
}

struct Error2 {
  double rel_rms, cosine;
};

Error2 compare(const Rows& exact, const Rows& approx) {
  double num = 0.0, den = 0.0, dot = 0.0, aa = 0.0;
  for (size_t i = 0; i < exact.size(); ++i) {
    const double a = bf16_to_f32(bf16{exact[i]}), b = bf16_to_f32(bf16{approx[i]});
    num += (a - b) * (a - b);
    den += a * a;
    dot += a * b;
    aa += b * b;
  }
  return {std::sqrt(num / den), dot / std::sqrt(den * aa)};
}

}  // namespace

void add_kvbench_flags(CLI::App& cmd, KvBenchArgs& a) {
  cmd.add_option("--kv-store", a.kv_store,
                 "the approximate tier to measure: kvi8r, kvi8s, kvfp4s or kvmix")
      ->transform(kv_tier_names(/*approximate_only=*/true))
      ->type_name("TEXT")
      ->default_str(std::string(kv_tier_name(a.kv_store)));
  cmd.add_option_function<std::string>(
         "--kv-mix-heads", [&a](const std::string& s) { a.kv_mix_heads = kvmix::parse_heads(s); },
         "kvmix: the heads on 8 bits, e.g. \"0,5,9\" (default: calibrated on each input)")
      ->type_name("LIST");
  cmd.add_option("--kv-mix-count", a.kv_mix_count,
                 "kvmix without --kv-mix-heads: heads the calibration keeps on 8 bits (0 = half)")
      ->check(whole_at_least(0))
      ->capture_default_str();
  cmd.add_option("--backend", a.backend,
                 "cpu (the definition of record) or cuda (where the tier has kernels)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  cmd.add_option("--tokens", a.tokens,
                 "keys and queries (with --checkpoint: the packed sequence length of its forward)")
      ->check(whole_at_least(1))
      ->capture_default_str();
  cmd.add_option("--heads", a.heads,
                 "heads of 128 dims of the synthetic inputs (H3: 56; a checkpoint's input has "
                 "the checkpoint's heads)")
      ->check(whole_at_least(1))
      ->capture_default_str();
  cmd.add_option("--inputs", a.inputs,
                 "gaussian (q, k, v ~ N(0, 1)), outlier (K channels 3, 17, 64, 100 x 20 plus a "
                 "per-head K offset, V channels 5, 77 x 10, query rows x U[0.5, 2]) and/or "
                 "checkpoint (needs --checkpoint; added by it when not listed)")
      ->check(CLI::IsMember({"gaussian", "outlier", "checkpoint"}))
      ->delimiter(',')
      ->capture_default_str();
  CLI::Option* checkpoint =
      cmd.add_option("--checkpoint", a.checkpoint,
                     "measure on the q, k, v of one DiT block (--block) of this ComfyUI-format "
                     "H3 .safetensors file too: a real forward of its weights over seeded random "
                     "latents at --tokens, run up to the block's input, then the block's norm1, "
                     "modulation, QKV projection and q/k norm + RoPE (the input named "
                     "'checkpoint')")
          ->check(CLI::ExistingFile);
  cmd.add_option("--block", a.block, "the DiT block whose q, k, v --checkpoint captures")
      ->check(whole_at_least(0))
      ->needs(checkpoint)
      ->capture_default_str();
  cmd.add_option("--seed", a.seed, "seed of the inputs (and of the checkpoint forward's latents)")
      ->capture_default_str();
  cmd.add_option("--threads", a.threads, "CPU threads (0 = all)")
      ->check(thread_count())
      ->capture_default_str();
  cmd.add_option("--repeat", a.repeat,
                 "time each attention (the exact kernel's and the tier's) this many times over "
                 "the same store and report the median (the first run is cold: it loads the "
                 "kernel, which matters at short sequences)")
      ->check(whole_at_least(1))
      ->capture_default_str();
  cmd.add_option_function<std::string>(
         "--attn-kernel", [&a](const std::string& s) { a.attn_kernel = parse_attn_kernel(s); },
         "cuda: the kernels of the tier and of the exact attention beside it, as h3s bench's "
         "--attn-kernel (default, sm80, sm90, sm80-1slab); the JSON names both")
      ->check(CLI::IsMember({"default", "sm80", "sm90", "sm80-1slab"}))
      ->type_name("TEXT")
      ->default_str("default");
  cmd.add_flag("--no-baseline{false}", a.baseline,
               "skip the baseline recipe (computed on the host, O(tokens^2): hours at 217k)");
  cmd.add_flag("--json", a.json, "one JSON object on stdout");
}

int run_kvbench(const KvBenchArgs& args) {
  KvBenchArgs a = args;
  const bool wants_checkpoint =
      std::find(a.inputs.begin(), a.inputs.end(), "checkpoint") != a.inputs.end();
  if (wants_checkpoint && a.checkpoint.empty())
    fail(ErrorKind::invalid_argument,
         "kvbench --inputs checkpoint needs --checkpoint FILE (the model whose block's q, k, v "
         "are measured)");
  if (!a.checkpoint.empty() && !wants_checkpoint) a.inputs.push_back("checkpoint");
  EngineBackend b(a.backend, 0, 0, a.threads);
  Backend& be = b.ops();
  be.use_kernels(a.attn_kernel, GemmKernel::automatic);
  if (!be.has_kv_tier(a.kv_store))
    fail(ErrorKind::invalid_argument,
         "kvbench: the {} backend has no {} kernels yet; measure the definition of record with "
         "--backend cpu",
         be.name(), kv_tier_name(a.kv_store));
  ThreadPool pool(a.threads);
  const bool mix = a.kv_store == KvTier::kvmix;
  const int64_t mix_count = !a.kv_mix_heads.empty() ? int64_t(a.kv_mix_heads.size())
                            : a.kv_mix_count > 0    ? a.kv_mix_count
                                                    : kvmix::default_8bit_count(a.heads);
  if (mix) {
    if (mix_count > a.heads)
      fail(ErrorKind::invalid_argument, "kvbench: kv_mix_count {} is more than --heads {}",
           mix_count, a.heads);
    kvmix::check_heads(a.kv_mix_heads, a.heads);
  }
  ExecOptions o;
  o.kv_store = a.kv_store;
  // The store's own bytes (kvmix's per-chunk gathers are not the store's).
  const double bytes_per_element = double(mix ? KvMixStore::bytes(a.tokens, a.heads, kHd, mix_count)
                                              : kv_store_bytes(o, a.tokens, a.heads, kHd)) /
                                   double(2 * a.tokens * a.heads * kHd);
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& kind : a.inputs) {
    Inputs in;
    nlohmann::json source;  // where a checkpoint input came from
    if (kind == "checkpoint") {
      if (!a.json)
        fmt::print(stderr, "h3s kvbench: block {}'s q, k, v from a forward of {} ({} tokens)...\n",
                   a.block, a.checkpoint, a.tokens);
      CapturedQkv c = capture_block_qkv(b, a.checkpoint, a.block, a.tokens, a.seed);
      be.use_kernels(a.attn_kernel, GemmKernel::automatic);  // the forward ran its own
      if (c.head_dim != kHd)
        fail(ErrorKind::invalid_argument,
             "kvbench --checkpoint {}: head_dim {}, the K/V tiers are defined for {}", a.checkpoint,
             c.head_dim, kHd);
      in = Inputs{std::move(c.q), std::move(c.k), std::move(c.v), c.tokens, c.heads};
      source = {{"checkpoint", a.checkpoint},
                {"block", a.block},
                {"blocks", c.blocks},
                {"format", c.format}};
    } else {
      if (!a.json)
        fmt::print(stderr, "h3s kvbench: {} inputs, {} tokens x {} heads...\n", kind, a.tokens,
                   a.heads);
      in = make_inputs(kind, a.tokens, a.heads, a.seed, pool);
    }
    const Attended exact = backend_attention(be, b.arena(), in, KvTier::bf16, {}, a.repeat);
    // kvmix: the given heads (checked against a checkpoint's heads), or the
    // calibration's on this input.
    std::vector<int> mix_heads;
    if (mix) {
      kvmix::check_heads(a.kv_mix_heads, in.heads);
      mix_heads = !a.kv_mix_heads.empty() ? a.kv_mix_heads
                                          : calibrate_mix(in, std::min(mix_count, in.heads), pool);
    }
    const Attended tier_run = backend_attention(be, b.arena(), in, a.kv_store, mix_heads, a.repeat);
    const Error2 tier = compare(exact.out, tier_run.out);
    const char* baseline = a.kv_store == KvTier::kvi8r   ? "per-row int8 without rotation"
                           : a.kv_store == KvTier::kvi8s ? "SageAttention-2 layout without rotation"
                           : mix                         ? "kvfp4s on every head"
                                                         : "rotated NVFP4 without centring";
    nlohmann::json r = {{"name", kind},          {"tokens", in.tokens},
                        {"heads", in.heads},     {"rel_rms", tier.rel_rms},
                        {"cosine", tier.cosine}, {"baseline", baseline}};
    if (mix) {
      r["kv_mix_heads"] = mix_heads;
      // The other end: every head on 8 bits.
      r["kvi8s_rel_rms"] =
          compare(exact.out, backend_attention(be, b.arena(), in, KvTier::kvi8s).out).rel_rms;
    }
    if (!source.is_null()) r.update(source);
    std::string base_text = "not computed (--no-baseline)";
    if (a.baseline) {
      const Error2 base = compare(
          exact.out, mix ? backend_attention(be, b.arena(), in, KvTier::kvfp4s).out
                     : a.kv_store == KvTier::kvfp4s ? fp4s_attention(in, false, pool)
                                                    : baseline_attention(a.kv_store, in, pool));
      r["baseline_rel_rms"] = base.rel_rms;
      r["baseline_cosine"] = base.cosine;
      base_text = fmt::format("{:.4g}", base.rel_rms);
    } else {
      r["baseline_rel_rms"] = nullptr;
    }
    std::string speed;
    if (a.backend == "cuda") {
      // 4 N^2 (heads x 128) multiply-adds x 2: QK^T and PV over every pair.
      const double ops = 4.0 * double(in.tokens) * double(in.tokens) * double(in.heads * kHd);
      r["seconds"] = tier_run.seconds;
      r["exact_seconds"] = exact.seconds;
      r["seconds_runs"] = tier_run.runs;
      r["exact_seconds_runs"] = exact.runs;
      r["tops"] = ops / tier_run.seconds / 1e12;
      r["exact_tops"] = ops / exact.seconds / 1e12;
      r["speed_vs_exact"] = exact.seconds / tier_run.seconds;
      r["time_vs_exact"] = tier_run.seconds / exact.seconds;
      speed = fmt::format(" | {:.3f} s ({:.0f} TOPS), exact {:.3f} s: {:.3f}x the exact time",
                          tier_run.seconds, ops / tier_run.seconds / 1e12, exact.seconds,
                          tier_run.seconds / exact.seconds);
    }
    results.push_back(r);
    if (!a.json)
      fmt::print("{:>10}: rel-rms {:.4g} (cosine {:.6f}) | baseline ({}) rel-rms {}{}{}\n", kind,
                 tier.rel_rms, tier.cosine, baseline, base_text, speed,
                 kind == "checkpoint" ? fmt::format(" | block {}, {} heads", a.block, in.heads)
                                      : std::string());
  }
  if (a.json) {
    const nlohmann::json j = {{"command", "kvbench"},
                              {"exact_kernel", std::string(be.attention_kernel())},
                              {"tier_kernel", std::string(be.kv_tier_kernel(a.kv_store))},
                              {"kv_store", std::string(kv_tier_name(a.kv_store))},
                              {"approximate", true},
                              {"backend", a.backend},
                              {"measured", "backend store"},
                              {"tokens", a.tokens},
                              {"heads", a.heads},
                              {"bytes_per_element", bytes_per_element},
                              {"inputs", results}};
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{} (approximate): {:.4f} bytes per K/V element\n", kv_tier_name(a.kv_store),
               bytes_per_element);
  }
  return 0;
}

}  // namespace h3s::cli
