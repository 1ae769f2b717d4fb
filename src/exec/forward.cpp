// The full forward (see forward.hpp): embeds -> refiner -> pack -> blocks ->
// final layer -> negated outputs, all activation memory from the arena.
#include "exec/forward.hpp"

#include <chrono>

#include "core/rng.hpp"
#include "exec/activation_estimate.hpp"
#include "exec/block.hpp"
#include "exec/final_layer.hpp"
#include "exec/self_check.hpp"
#include "exec/time_embed.hpp"

namespace h3s {

namespace {

void expect_size(size_t got, int64_t want, const char* what) {
  if (int64_t(got) != want)
    fail(ErrorKind::invalid_argument, "forward input {} has {} values, expected {}", what, got,
         want);
}

// Everything that exists only to build the packed sequence.
struct Embeds {
  OwnedTensor video_in, video_f32, video, audio_in, audio_f32, audio, text_in, text;
  void reset() { *this = Embeds{}; }
};

Embeds embed(Backend& be, Arena& arena, WeightFeed& feed, const PackedLayout& layout,
             const ForwardInputs& in) {
  const ModelWeights& w = feed.model();
  const ModelConfig& c = w.config;
  Embeds e;
  const int64_t nv = layout.rows_of(SegmentKind::cond) + layout.rows_of(SegmentKind::video);
  const int64_t na = layout.rows_of(SegmentKind::audio), nt = layout.text_len;
  auto patch = [&](const std::vector<float>& host, int64_t rows, const QuantLinear& proj,
                   OwnedTensor& in_t, OwnedTensor& f32, OwnedTensor& out, const char* what) {
    in_t = arena.tensor(DType::f32, {rows, proj.in}, what);
    be.upload(host.data(), in_t.view);
    f32 = arena.tensor(DType::f32, {rows, c.hidden}, what);
    be.linear(in_t.view, proj, f32.view);  // fp32 island
    out = arena.tensor(DType::bf16, {rows, c.hidden}, what);
    be.convert(f32.view, out.view);
  };
  patch(in.video_rows, nv, w.video_patch, e.video_in, e.video_f32, e.video, "video patch embed");
  patch(in.audio_rows, na, w.audio_patch, e.audio_in, e.audio_f32, e.audio, "audio patch embed");

  e.text_in = arena.tensor(DType::bf16, {nt, c.text_dim}, "text states");
  be.upload(in.text.data(), e.text_in.view);
  e.text = arena.tensor(DType::bf16, {nt, c.hidden}, "text embed");
  be.linear(e.text_in.view, w.condition_proj, e.text.view);
  arena.mark(-1, Phase::refiner);
  for (int64_t i = 0; i < c.refiner_blocks; ++i) {
    run_block_stock(be, arena, BlockView::refiner(feed.refiner(size_t(i)), c), e.text.view);
    feed.done_refiner(size_t(i));
  }
  be.rms_norm_mod(e.text.view, norm_tensor(w.refiner_final_norm), c.eps, nullptr, {}, e.text.view);
  return e;
}

}  // namespace

ForwardOutputs run_forward(Backend& be, Arena& arena, const ModelWeights& w,
                           const PackedLayout& layout, const ForwardInputs& in,
                           const ExecOptions& opt, const ProgressFn& progress) {
  opt.validate();
  const auto report = [&](const std::string& stage) {
    if (progress) progress(stage);
  };
  const ModelConfig& c = w.config;
  const int64_t seq = layout.seq_len;
  const int64_t nv = layout.rows_of(SegmentKind::cond) + layout.rows_of(SegmentKind::video);
  expect_size(in.video_rows.size(), nv * c.video_features(), "video_rows");
  expect_size(in.audio_rows.size(), layout.rows_of(SegmentKind::audio) * c.audio_latent,
              "audio_rows");
  expect_size(in.text.size(), layout.text_len * c.text_dim, "text");

  const auto t0 = std::chrono::steady_clock::now();
  arena.clear_ledger();
  arena.reset_peak();
  ForwardOutputs out;
  out.weight_bytes = w.bytes();

  // The device budget: the activation estimate first, the rest for weights;
  // the arena then gets what the weights plan leaves.
  out.activation_estimate = estimate_activation_peak(c, layout, opt);
  size_t weight_budget = 0;
  if (opt.vram_budget != 0) {
    if (opt.vram_budget <= out.activation_estimate)
      fail(ErrorKind::out_of_memory,
           "--vram-budget {} cannot hold this forward's activations ({} estimated at {} tokens) "
           "and any weights: raise the budget or lower the chunk sizes",
           format_bytes(opt.vram_budget), format_bytes(out.activation_estimate), seq);
    weight_budget = size_t(opt.vram_budget) - out.activation_estimate;
  }
  try {
    out.weights = plan_weights(be, w, weight_budget);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::out_of_memory || opt.vram_budget == 0) throw;
    const WeightPlan all = plan_weights(be, w, 0);
    const size_t need = out.activation_estimate + all.extras_bytes + all.block_bytes;
    fail(ErrorKind::out_of_memory,
         "--vram-budget {} cannot hold this forward: its activations ({} estimated at {} tokens) "
         "plus the weights it must hold at once (non-block weights {} and one block {}) need at "
         "least {}; raise the budget (or lower the chunk sizes)",
         format_bytes(opt.vram_budget), format_bytes(out.activation_estimate), seq,
         format_bytes(all.extras_bytes), format_bytes(all.block_bytes), format_bytes(need));
  }
  report(out.weights.describe());
  WeightFeed feed(be, w, out.weights);
  const ModelWeights& wx = feed.model();
  const size_t arena_budget = arena.budget();
  struct RestoreBudget {
    Arena& a;
    size_t b;
    ~RestoreBudget() { a.set_budget(b); }
  } restore{arena, arena_budget};
  if (opt.vram_budget != 0) {
    const size_t left = size_t(opt.vram_budget) - out.weights.held_bytes;
    arena.set_budget(arena_budget == 0 ? left : std::min(arena_budget, left));
  }

  arena.mark(-1, Phase::embed);
  report("embed + refiner");
  Embeds e = embed(be, arena, feed, layout, in);
  arena.mark(-1, Phase::embed);
  OwnedTensor x = arena.tensor(DType::bf16, {seq, c.hidden}, "residual x");
  int64_t voff = 0;
  for (const Segment& s : layout.segments) {
    const Tensor dst = x.view.rows_view(s.begin, s.end);
    if (s.kind == SegmentKind::text) {
      be.copy(e.text.view, dst);
    } else if (s.kind == SegmentKind::audio) {
      be.copy(e.audio.view, dst);
    } else {  // cond and video rows follow segment order in the video embed
      be.copy(e.video.view.rows_view(voff, voff + s.size()), dst);
      voff += s.size();
    }
  }
  if (opt.trim_forward) e.reset();  // the packed sequence holds everything now

  OwnedTensor adaln_in = adaln_input(be, arena, wx, layout.timesteps);
  OwnedTensor rope = arena.tensor(DType::bf16, {seq, c.rope_dim / 2, 2}, "RoPE table");
  {
    const std::vector<uint16_t> table = rope_table(layout, w.rope_inv_freq, c.rope_dim);
    be.upload(table.data(), rope.view);
  }

  const bool streamed = opt.mode == ExecMode::streamed && seq >= opt.min_tokens;
  const StreamChunks chunks = StreamChunks::from(opt);
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    report(fmt::format("block {}/{}", i + 1, w.blocks.size()));
    arena.mark(int(i), Phase::setup);
    const BlockWeights& bw = feed.block(i);
    OwnedTensor mods = adaln_project(be, arena, bw.adaln, adaln_in.view, "block adaln");
    BlockContext ctx;
    ctx.config = &c;
    ctx.layout = &layout;
    ctx.rope = rope.view;
    ctx.mods = split_block_mods(mods.view, c.hidden);
    ctx.block_index = int(i);
    const BlockView view = BlockView::dit(bw, ctx);
    if (i == 0 && opt.self_check)
      out.log.push_back(self_check_block(be, arena, view, x.view, opt).line(seq));
    if (streamed) {
      run_block_streamed(be, arena, view, x.view, chunks);
      ++out.streamed_blocks;
    } else {
      run_block_stock(be, arena, view, x.view);
      ++out.stock_blocks;
    }
    feed.done_block(i);
  }

  arena.mark(-1, Phase::final);
  report("final layer");
  const int64_t fchunk = opt.mode == ExecMode::stock ? 0 : opt.final_layer_chunk;
  FinalOutputs f = run_final_layer(be, arena, wx, layout, x.view, adaln_in.view, fchunk,
                                   opt.final_layer_gemm, opt.merge_tail_below);
  // The network's outputs, negated (MiniMaxH3Model._forward); the sampler's
  // audio carry around it is exec/latent_forward.cpp's.
  be.scale(f.video.view, -1.0f);
  be.scale(f.audio.view, -1.0f);
  out.video.resize(size_t(f.video.view.numel()));
  out.audio.resize(size_t(f.audio.view.numel()));
  be.download(f.video.view, out.video.data());
  be.download(f.audio.view, out.audio.data());
  be.synchronize();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.peak_bytes = arena.peak();
  out.ledger = arena.ledger();
  out.weights_peak_bytes = feed.peak_bytes();
  return out;
}

ForwardInputs random_inputs(const ModelConfig& c, const PackedLayout& layout, uint64_t seed) {
  ForwardInputs in;
  Rng r(seed);
  const int64_t nv = layout.rows_of(SegmentKind::cond) + layout.rows_of(SegmentKind::video);
  in.video_rows.resize(size_t(nv * c.video_features()));
  for (float& v : in.video_rows) v = r.normal();
  in.audio_rows.resize(size_t(layout.rows_of(SegmentKind::audio) * c.audio_latent));
  for (float& v : in.audio_rows) v = r.normal();
  in.text.resize(size_t(layout.text_len * c.text_dim));
  for (uint16_t& v : in.text) v = f32_to_bf16(r.normal()).bits;
  return in;
}

}  // namespace h3s
