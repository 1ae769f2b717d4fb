// Block-level benchmark (see bench_cmd.hpp).
#include "bench_cmd.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli_checks.hpp"
#include "core/rng.hpp"
#include "core/thread_pool.hpp"
#include "driver_peak.hpp"
#include "exec/block.hpp"
#include "exec/exact_rows.hpp"
#include "exec/kvmix_heads.hpp"
#include "exec/placement.hpp"
#include "exec/residual_rows.hpp"
#include "exec/time_embed.hpp"
#include "exec/weight_feed.hpp"
#include "kv/kv_tier_table.hpp"
#include "model/weights.hpp"
#include "runtime/engine_backend.hpp"

namespace h3s::cli {

void add_bench_flags(CLI::App& cmd, BenchArgs& a) {
  add_run_flags(cmd, a.run);
  cmd.add_option("--token-list", a.token_list,
                 "sequence lengths to measure, e.g. 32768,131072,217088")
      ->delimiter(',');
  cmd.add_option("--reps", a.reps, "timed repetitions per measurement (the minimum is reported)")
      ->check(whole_at_least(1));
  cmd.add_flag("--skip-stock", a.skip_stock,
               "measure only the streamed block (with an approximate --kv-store also no exact "
               "store's stock block: rel_rms_vs_exact is null)");
  cmd.add_flag("--skip-attention", a.skip_attention,
               "skip the attention-alone measurement (it holds a whole [S, 3 x 7168] QKV)");
  cmd.add_flag("--only-attention", a.only_attention,
               "measure only attention (no stock or streamed block run)");
  cmd.add_flag("--phase-times", a.phase_times,
               "also report the streamed block's seconds per phase (phase_s: kv, attn, mlp), "
               "synchronising the device as each phase starts: a profile, which drops the "
               "overlap of copies across phases, so streamed_s is not the block's time then");
  cmd.add_option("--attn-kernels", a.attn_kernels,
                 "also time attention alone on these --attn-kernel choices (default, sm80, "
                 "sm90, sm80-1slab; CUDA only), each reported under the kernel's name")
      ->check(CLI::IsMember({"default", "sm80", "sm90", "sm80-1slab"}))
      ->delimiter(',');
  // TEST ONLY: hidden (no group), for tests/cli's forced mismatch (bench_cmd.hpp).
  cmd.add_flag("--test-flip-streamed-bit", a.test_flip_streamed_bit,
               "test only: flip one bit of the streamed output before the comparison")
      ->group("");
  cmd.footer(
      "Exit codes: 0 when every stock vs streamed comparison found the same bits, or none "
      "was made (--skip-stock, --only-attention: bit_equal null, \"not compared\"); 3 when a "
      "comparison found different bits (every length still runs and prints); 2 for bad "
      "input; 1 for any other error.");
}

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// An approximate tier's block output against the exact store's, in double
// over every value of the output residual x: rel_rms = sqrt(sum (a - b)^2 /
// sum b^2), the largest |a - b|, and the same error against the block's own
// update (b - x0: the residual's input carries no error and would dilute it).
struct VsExact {
  double rel_rms = 0.0, max_abs = 0.0, update_rel_rms = 0.0;
};

VsExact error_vs_exact(const std::vector<uint16_t>& approx, const std::vector<uint16_t>& exact,
                       const std::vector<uint16_t>& x0) {
  H3S_CHECK(approx.size() == exact.size() && exact.size() == x0.size());
  // Fixed slabs summed in order: the same result whatever the thread count.
  constexpr int64_t kSlab = int64_t(1) << 20;
  const int64_t n = int64_t(exact.size()), slabs = (n + kSlab - 1) / kSlab;
  struct Sums {
    double err = 0.0, ref = 0.0, update = 0.0, max_abs = 0.0;
  };
  std::vector<Sums> part(static_cast<size_t>(slabs));
  ThreadPool pool(0);
  pool.parallel_for(slabs, 1, [&](int64_t first, int64_t last) {
    for (int64_t slab = first; slab < last; ++slab) {
      Sums& p = part[size_t(slab)];
      for (int64_t i = slab * kSlab; i < std::min(n, (slab + 1) * kSlab); ++i) {
        const double a = bf16_to_f32(bf16{approx[size_t(i)]}),
                     b = bf16_to_f32(bf16{exact[size_t(i)]}),
                     u = b - double(bf16_to_f32(bf16{x0[size_t(i)]}));
        p.err += (a - b) * (a - b);
        p.ref += b * b;
        p.update += u * u;
        if (!(std::fabs(a - b) <= p.max_abs)) p.max_abs = std::fabs(a - b);  // NaN sticks
      }
    }
  });
  Sums t;
  for (const Sums& p : part) {
    t.err += p.err;
    t.ref += p.ref;
    t.update += p.update;
    if (!(p.max_abs <= t.max_abs)) t.max_abs = p.max_abs;
  }
  return {.rel_rms = std::sqrt(t.err / t.ref),
          .max_abs = t.max_abs,
          .update_rel_rms = std::sqrt(t.err / t.update)};
}

}  // namespace

int run_bench(BenchArgs& a) {
  RunArgs& r = a.run;
  r.exec.final_layer_gemm = parse_final_gemm(r.final_gemm);
  r.exec.validate();
  ModelConfig cfg = config_from(r);
  cfg.blocks = 1;
  cfg.refiner_blocks = 0;
  if (!r.json)
    fmt::print(stderr, "h3s bench: building one {} {} block (seed {})...\n", cfg.name, r.format,
               r.seed);
  const ModelWeights w = ModelWeights::random(cfg, parse_format(r.format), r.seed);
  // --vram-budget here is the block's activation budget (its weights stay
  // resident beside it): the placement planner decides where the K/V live.
  const size_t budget = parse_bytes(r.vram_budget, "--vram-budget");
  ExecOptions plan_opts = r.exec;
  plan_opts.min_tokens = 0;  // the bench always measures the streamed block
  bool bits_differ = false;  // some length's comparison found different bits
  for (int64_t tokens : a.token_list) {
    RunArgs shape = r;
    shape.tokens = tokens;
    const PackedLayout layout = layout_from(shape, cfg);
    EngineBackend b(r.backend, 0, parse_bytes(r.memory_budget), r.threads);
    Backend& be = b.ops();
    be.use_kernels(r.exec.attn_kernel, r.exec.gemm_kernel);  // before the planner asks it
    Arena& arena = b.arena();
    const int64_t s = layout.seq_len, h = cfg.hidden;
    // The block's weights, resident on the backend (what a forward whose
    // model fits holds).
    const WeightPlan weight_plan = plan_weights(be, w, 0);
    WeightFeed feed(be, w, weight_plan);
    const BlockWeights& bw = feed.block(0);
    // Inputs: modulation, RoPE table, the block input x0.
    OwnedTensor adaln_in = adaln_input(be, arena, feed.model(), layout.timesteps);
    OwnedTensor mods = adaln_project(be, arena, bw.adaln, adaln_in.view, "mods");
    OwnedTensor rope = arena.tensor(DType::bf16, {s, cfg.rope_dim / 2, 2}, "rope");
    be.upload(rope_table(layout, w.rope_inv_freq, cfg.rope_dim).data(), rope.view);
    // The block input x0 stays in host memory: each repetition starts from it.
    std::vector<uint16_t> host(size_t(s * h));
    {
      // Fixed 4096-row slabs with their own seeds, filled in parallel: the
      // values do not depend on the thread count (1.2e9 samples at 217k).
      constexpr int64_t kSlabRows = 4096;
      ThreadPool pool(0);
      pool.parallel_for((s + kSlabRows - 1) / kSlabRows, 1, [&](int64_t first, int64_t last) {
        for (int64_t slab = first; slab < last; ++slab) {
          Rng rng(mix_seed(r.seed + uint64_t(tokens), uint64_t(slab)));
          const int64_t end = std::min(s, (slab + 1) * kSlabRows) * h;
          for (int64_t i = slab * kSlabRows * h; i < end; ++i)
            host[size_t(i)] = f32_to_bf16(rng.normal()).bits;
        }
      });
    }
    BlockContext ctx;
    ctx.config = &cfg;
    ctx.layout = &layout;
    ctx.rope = rope.view;
    ctx.mods = split_block_mods(mods.view, h);
    ctx.block_index = 0;
    const BlockView view = BlockView::dit(bw, ctx);
    const size_t host_budget =
        r.exec.host_budget != 0 ? size_t(r.exec.host_budget) : available_host_memory() / 10 * 9;
    const Placement place = plan_placement(cfg, layout, plan_opts, budget, host_budget,
                                           scratch_model(be, w, plan_opts.kv_store));
    // The streamed block's own bytes (x, the RoPE table, the modulation
    // and the adaLN input are the bench's, allocated before the run; a
    // host-staged x's device slots are the run's own).
    const size_t x_slots =
        place.x_on_host ? ResidualRows::slot_bytes(ResidualRows::slot_rows_for(
                                                       s, r.exec.kv_chunk, r.exec.q_chunk,
                                                       r.exec.mlp_chunk, r.exec.merge_tail_below),
                                                   h)
                        : 0;
    const size_t predicted_block =
        std::max({place.kv_peak, place.attn_peak, place.mlp_peak}) - place.block_live + x_slots;
    StreamChunks chunks = StreamChunks::from(r.exec);
    chunks.kv_block = place.kv_block;
    chunks.q_group = place.q_group;
    chunks.kv_first_pass = place.kv_first_pass;
    chunks.exact_rows = exact_query_rows(r.exec, layout);
    if (r.exec.kv_store == KvTier::kvmix) {  // the heads on 8 bits, calibrated on x0 once
      OwnedTensor x0 = arena.tensor(DType::bf16, {s, h}, "x0 (kvmix calibration)");
      be.upload(host.data(), x0.view);
      chunks.kv_mix_heads = KvMixHeads{}.for_block(be, arena, view, x0.view, r.exec);
    }
    std::unique_ptr<Arena> staging;
    if (place.kv_on_host || place.x_on_host)
      staging = std::make_unique<Arena>(be.host_staging_memory(), host_budget);
    StageTraffic traffic;  // of the last streamed repetition
    // x for the streamed run: on the device, or in host staging memory when
    // the placement stages it (stock always runs on a device x).
    size_t streamed_total = 0;  // the streamed run's whole arena peak (bench buffers too)
    std::map<std::string, double> phase_s;  // --phase-times: of the fastest streamed repetition
    // stock: the block through `tier`'s store (an approximate tier's exact
    // reference passes bf16).
    auto measure = [&](bool streamed, std::vector<uint16_t>& out, KvTier tier, int reps) {
      double best = 1e30;
      size_t peak = 0;
      const bool x_host = streamed && place.x_on_host;
      OwnedTensor x = x_host ? staging->tensor(DType::bf16, {s, h}, "x (host-staged)")
                             : arena.tensor(DType::bf16, {s, h}, "x");
      for (int rep = 0; rep < reps; ++rep) {
        if (x_host)
          std::memcpy(x.view.data, host.data(), host.size() * sizeof(uint16_t));
        else
          be.upload(host.data(), x.view);
        be.synchronize();
        const size_t base = arena.allocated();
        arena.reset_peak();
        std::unique_ptr<StageQueue> queue = staging ? be.make_stage_queue() : nullptr;
        StreamChunks c = chunks;
        if (place.kv_on_host) {
          c.kv_host = staging.get();
          c.kv_queue = queue.get();
        }
        std::vector<std::pair<Phase, double>> starts;
        if (a.phase_times)
          c.on_phase = [&](Phase p) {
            be.synchronize();
            starts.emplace_back(p, now_s());
          };
        const double t0 = now_s();
        if (streamed && x_host) {
          ResidualRows rows(x.view, arena, *queue,
                            ResidualRows::slot_rows_for(s, c.kv_chunk, c.q_chunk, c.mlp_chunk,
                                                        c.merge_tail_below));
          run_block_streamed(be, arena, view, rows, c);
        } else if (streamed) {
          run_block_streamed(be, arena, view, x.view, c);
        } else {
          const BlockKv stock_kv{tier, chunks.exact_rows, chunks.kv_mix_heads};
          run_block_stock(be, arena, view, x.view, BlockPhases::all, stock_kv);
        }
        be.synchronize();
        const double t1 = now_s();
        if (streamed && t1 - t0 < best && !starts.empty()) {
          phase_s.clear();
          for (size_t i = 0; i < starts.size(); ++i)
            phase_s[std::string(phase_name(starts[i].first))] =
                (i + 1 < starts.size() ? starts[i + 1].second : t1) - starts[i].second;
        }
        best = std::min(best, t1 - t0);
        if (queue && streamed) traffic = queue->traffic();
        // The streamed run's own bytes: a device x counts as the caller's.
        peak = arena.peak() - base;
        if (streamed) streamed_total = arena.peak();
      }
      out.resize(size_t(s * h));
      if (x_host)
        std::memcpy(out.data(), x.view.data, out.size() * sizeof(uint16_t));
      else
        be.download(x.view, out.data());
      return std::pair<double, size_t>{best, peak};
    };
    std::vector<uint16_t> out_stock, out_streamed;
    std::pair<double, size_t> stock{0.0, 0};
    if (!a.skip_stock && !a.only_attention)
      stock = measure(false, out_stock, r.exec.kv_store, a.reps);
    std::pair<double, size_t> streamed{0.0, 0};
    // The driver's count of the device in use at its highest during the
    // streamed run, stock's cached bytes handed back first: the CUDA context,
    // the weights, the bench's buffers and the run's own (driver_peak.hpp).
    size_t driver_in_use = 0;
    if (!a.only_attention) {
      be.trim_device_cache();
      DriverPeak driver_peak([&be] { return be.device_memory_in_use(); });
      streamed = measure(true, out_streamed, r.exec.kv_store, a.reps);
      be.synchronize();
      driver_in_use = driver_peak.stop();
    }
    // Compared only when both blocks ran: otherwise bit_equal is null ("not
    // compared"), never a false that reads like a mismatch.
    std::optional<bool> equal;
    if (!a.skip_stock && !a.only_attention) {
      if (a.test_flip_streamed_bit && !out_streamed.empty()) out_streamed[0] ^= 1u;  // TEST ONLY
      equal = out_stock == out_streamed;
      if (!*equal) bits_differ = true;
    }
    // An approximate tier (one this backend runs: otherwise the exact store
    // ran): its streamed output (its stock output's bits when bit_equal)
    // against the exact store's stock block on the same x0, run once. The
    // tier's stock output goes first, so the host holds two outputs at once.
    const bool approximate = !kv_tier_exact(r.exec.kv_store) && be.has_kv_tier(r.exec.kv_store);
    std::optional<VsExact> vs_exact;
    if (approximate && !a.skip_stock && !a.only_attention) {
      std::vector<uint16_t>().swap(out_stock);
      std::vector<uint16_t> out_exact;
      measure(false, out_exact, KvTier::bf16, 1);
      vs_exact = error_vs_exact(out_streamed, out_exact, host);
    }
    // Attention alone: every query against every key in q_chunk-row calls.
    double attn_s = 0.0, attn_state_s = 0.0;
    std::map<std::string, double> kernel_s;  // --attn-kernels: median seconds each
    if (!a.skip_attention) {
      const int64_t inner = cfg.inner();
      OwnedTensor qkv = arena.tensor(DType::bf16, {s, 3 * inner}, "bench qkv");
      {
        OwnedTensor x0 = arena.tensor(DType::bf16, {s, h}, "x0");
        be.upload(host.data(), x0.view);
        be.copy(x0.view, qkv.view.cols_view(0, h));  // any finite bf16 data will do
        be.copy(x0.view, qkv.view.cols_view(h, 2 * h));
        be.copy(x0.view, qkv.view.cols_view(2 * h, 3 * h));
      }
      auto heads_view = [&](int64_t col0) {
        Tensor t = qkv.view.cols_view(col0, col0 + inner);
        t.rank = 3;
        t.shape = {s, cfg.heads, cfg.head_dim, 0};
        t.stride = {3 * inner, cfg.head_dim, 1, 0};
        return t;
      };
      const KvView kv{heads_view(inner), heads_view(2 * inner)};
      const ChunkPlan plan = ChunkPlan::balanced(s, r.exec.q_chunk);
      OwnedTensor o = arena.tensor(DType::bf16, {plan.largest(), inner}, "bench attn out");
      std::vector<AttnState> states;
      for (const RowRange& c : plan.chunks)
        states.push_back(AttnState::allocate(arena, c.size(), cfg.heads, cfg.head_dim));
      const Tensor q = qkv.view.cols_view(0, inner);
      // Kernel time only (events on the stream): every query chunk against
      // every key, the state's fresh start and finish fused where the kernel
      // has them. The separate reset and finish are timed apart.
      auto attend = [&] {
        for (size_t i = 0; i < plan.chunks.size(); ++i) {
          const RowRange c = plan.chunks[i];
          const Tensor out = o.view.rows_view(0, c.size());
          be.attention_with_ends(q.rows_view(c.begin, c.end), kv, {0, s}, states[i],
                                 {.fresh = true, .out = &out});
        }
      };
      auto state_ends = [&] {
        for (size_t i = 0; i < plan.chunks.size(); ++i) {
          be.attn_state_reset(states[i]);
          be.attn_state_finish(states[i], o.view.rows_view(0, plan.chunks[i].size()));
        }
      };
      // Median of at least 3 runs after a warm-up.
      auto median_attend = [&] {
        const int attn_reps = std::max(3, a.reps);
        be.device_seconds(attend);
        std::vector<double> times;
        for (int i = 0; i < attn_reps; ++i) times.push_back(be.device_seconds(attend));
        std::sort(times.begin(), times.end());
        return times[times.size() / 2];
      };
      attn_s = median_attend();
      attn_state_s = be.device_seconds(state_ends);
      // Other kernels, each the backend's choice for one request, then back.
      for (const std::string& k : a.attn_kernels) {
        be.use_kernels(parse_attn_kernel(k), r.exec.gemm_kernel);
        kernel_s[std::string(be.attention_kernel())] = median_attend();
      }
      be.use_kernels(r.exec.attn_kernel, r.exec.gemm_kernel);
    }
    const double attn_flops = 4.0 * double(s) * double(s) * double(cfg.inner());
    nlohmann::json j = {
        {"tokens", s},
        {"preset", cfg.name},
        {"format", r.format},
        {"backend", r.backend},
        {"stock_s", stock.first},
        {"streamed_s", streamed.first},
        {"stock_peak_gib", double(stock.second) / (1u << 30)},
        {"streamed_peak_gib", double(streamed.second) / (1u << 30)},
        {"bit_equal", equal ? nlohmann::json(*equal) : nlohmann::json(nullptr)},
        {"kv_store", std::string(kv_tier_name(r.exec.kv_store))},
        {"approximate", approximate},
        {"kv_mix_heads", chunks.kv_mix_heads},
        {"attn_s", attn_s},
        {"attn_state_s", attn_state_s},
        {"attn_kernel", std::string(be.attention_kernel())},
        {"kv_kernel", be.kv_tier_kernel(r.exec.kv_store)},
        {"gemm_kernel", std::string(gemm_kernel_name(r.exec.gemm_kernel))},
        {"attn_kernels_s", kernel_s},
        {"attn_kernels_tflops",
         [&] {
           std::map<std::string, double> t;
           for (const auto& [k, sec] : kernel_s) t[k] = attn_flops / sec / 1e12;
           return t;
         }()},
        {"attn_tflops", attn_flops / attn_s / 1e12},
        {"q_chunk", r.exec.q_chunk},
        {"kv_chunk", r.exec.kv_chunk},
        {"mlp_chunk", r.exec.mlp_chunk},
        {"kv_block", place.kv_block},
        {"vram_budget", budget},
        {"placement", place.describe()},
        {"kv", place.kv_on_host ? "host-staged" : "device"},
        {"x", place.x_on_host ? "host-staged" : "device"},
        {"q_group", place.q_group},
        {"kv_first_pass", place.kv_first_pass},
        {"predicted_streamed_peak_gib", double(predicted_block) / (1u << 30)},
        {"host_gib", double(place.host_bytes) / (1u << 30)},
        {"to_device_gib", double(traffic.to_device_bytes) / (1u << 30)},
        {"to_host_gib", double(traffic.to_host_bytes) / (1u << 30)},
        {"weights_gib", double(weight_plan.model_bytes) / (1u << 30)},
        // Everything the streamed run held on the device at
        // its peak: the block's weights, the bench's inputs, the run's own.
        {"device_total_gib", double(weight_plan.model_bytes + streamed_total) / (1u << 30)},
        // The same by the driver, its highest reading sampled every 2 ms over the
        // streamed run (null where the backend cannot say, e.g. the CPU's)
        {"device_in_use_driver_gib", driver_in_use
                                         ? nlohmann::json(double(driver_in_use) / (1u << 30))
                                         : nlohmann::json(nullptr)},
        {"copy_s", traffic.copy_seconds},
        {"exposed_copy_s", traffic.exposed_seconds}};
    if (a.phase_times) j["phase_s"] = phase_s;
    // Only an approximate tier has these: the exact store's error against
    // itself is 0 by construction and would cost a stock block.
    std::string vs_exact_text;
    if (approximate) {
      j["rel_rms_vs_exact"] = vs_exact ? nlohmann::json(vs_exact->rel_rms) : nullptr;
      j["max_abs_vs_exact"] = vs_exact ? nlohmann::json(vs_exact->max_abs) : nullptr;
      j["update_rel_rms_vs_exact"] = vs_exact ? nlohmann::json(vs_exact->update_rel_rms) : nullptr;
      vs_exact_text =
          vs_exact ? fmt::format(
                         " | {} vs exact store: rel-rms {:.3g} (of the update {:.3g}), "
                         "max abs {:.3g}",
                         kv_tier_name(r.exec.kv_store), vs_exact->rel_rms, vs_exact->update_rel_rms,
                         vs_exact->max_abs)
                   : fmt::format(" | {} (approximate) vs exact store: not run (--skip-stock)",
                                 kv_tier_name(r.exec.kv_store));
    }
    if (r.json)
      fmt::print("{}\n", j.dump());
    else
      fmt::print(
          "{:>8} tokens  stock {:8.3f} s {:7.2f} GiB | streamed {:8.3f} s {:7.2f} GiB "
          "(predicted {:.2f}, K/V {}){} | bit-equal {} | attention {:6.1f} TFLOP/s{}\n",
          s, stock.first, j["stock_peak_gib"].get<double>(), streamed.first,
          j["streamed_peak_gib"].get<double>(), j["predicted_streamed_peak_gib"].get<double>(),
          place.kv_on_host ? "host-staged" : "on the device",
          driver_in_use
              ? fmt::format(", device {:.2f} GiB by the driver", double(driver_in_use) / (1u << 30))
              : std::string(),
          !equal   ? "not compared"
          : *equal ? "yes"
                   : "NO (bits differ)",
          j["attn_tflops"].get<double>(), vs_exact_text);
    std::fflush(stdout);
    if (equal == false)
      fmt::print(stderr,
                 "h3s bench: the streamed block's bits differ from the stock block's at {} "
                 "tokens\n",
                 s);
  }
  return bits_differ ? kExitBitsDiffer : 0;
}

}  // namespace h3s::cli
