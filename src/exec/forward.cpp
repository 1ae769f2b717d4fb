// The full forward (see forward.hpp): embeds -> refiner -> pack -> blocks ->
// final layer -> negated outputs, all activation memory from the arena.
#include "exec/forward.hpp"

#include <chrono>
#include <optional>

#include "core/rng.hpp"
#include "exec/block.hpp"
#include "exec/exact_rows.hpp"
#include "exec/final_layer.hpp"
#include "exec/kvmix_heads.hpp"
#include "exec/placement.hpp"
#include "exec/placement_setup.hpp"
#include "exec/residual_rows.hpp"
#include "exec/self_check.hpp"
#include "exec/time_embed.hpp"

namespace h3s {

namespace {

void expect_size(size_t got, int64_t want, const char* what) {
  if (int64_t(got) != want)
    fail(ErrorKind::invalid_argument, "forward input {} has {} values, expected {}", what, got,
         want);
}

// The text embed: condition projection, the refiner's stock blocks, the
// refiner's final norm (in place).
OwnedTensor embed_text(Backend& be, Arena& arena, WeightFeed& feed, const PackedLayout& layout,
                       const ForwardInputs& in, OwnedTensor& text_in) {
  const ModelWeights& w = feed.model();
  const ModelConfig& c = w.config;
  const int64_t nt = layout.text_len;
  text_in = arena.tensor(DType::bf16, {nt, c.text_dim}, "text states");
  be.upload(in.text.data(), text_in.view);
  OwnedTensor text = arena.tensor(DType::bf16, {nt, c.hidden}, "text embed");
  be.linear(text_in.view, w.condition_proj, text.view);
  arena.mark(-1, Phase::refiner);
  for (int64_t i = 0; i < c.refiner_blocks; ++i) {
    run_block_stock(be, arena, BlockView::refiner(feed.refiner(size_t(i)), c), text.view);
    feed.done_refiner(size_t(i));
  }
  be.rms_norm_mod(text.view, norm_tensor(w.refiner_final_norm), c.eps, nullptr, {}, text.view);
  return text;
}

// The patch embed of host rows [src_begin, src_begin + dst.size()) of `host`
// (fp32 [rows, proj.in]) into rows `dst` of x (bf16): the fp32 island, then
// one rounding. chunk = 0: one GEMM over the span with its buffers, as
// ComfyUI holds them; otherwise row chunks, the same bits (the linear is
// row-invariant) without an fp32 [N, features] buffer over the sequence.
void embed_patches(Backend& be, Arena& arena, const QuantLinear& proj,
                   const std::vector<float>& host, int64_t src_begin, ResidualRows& x, RowRange dst,
                   int64_t chunk, int64_t merge_tail_below, const char* what) {
  for (const RowRange& r : ChunkPlan::fixed(dst.size(), chunk, merge_tail_below).chunks) {
    OwnedTensor in_t = arena.tensor(DType::f32, {r.size(), proj.in}, what);
    be.upload(host.data() + (src_begin + r.begin) * proj.in, in_t.view);
    OwnedTensor f32 = arena.tensor(DType::f32, {r.size(), proj.out}, what);
    be.linear(in_t.view, proj, f32.view);
    in_t.reset();
    const RowRange rows{dst.begin + r.begin, dst.begin + r.end};
    const ResidualRows::Lease xr = x.fetch(rows, /*load=*/false);
    be.convert(f32.view, xr.view);
    x.store(xr, rows);
  }
}

// The residual x: its memory (the device arena, or host staging when the
// placement stages it) and its rows as the executors use them.
struct Residual {
  OwnedTensor memory;
  std::optional<ResidualRows> rows;
};

// The packed sequence x [seq, hidden] bf16: text (after the refiner), audio
// and the cond / video rows in segment order. With embed_chunk = 0 (the
// stock path) each patch embed is one buffer over its span, kept until x is
// assembled (and after, unless trim_forward); otherwise chunks go straight
// into x. host / queue: x lives in host staging memory (placement).
Residual pack_sequence(Backend& be, Arena& arena, WeightFeed& feed, const PackedLayout& layout,
                       const ForwardInputs& in, const ExecOptions& opt, int64_t embed_chunk,
                       Arena* host, StageQueue* queue, std::vector<OwnedTensor>& kept) {
  const ModelWeights& w = feed.model();
  const int64_t hidden = w.config.hidden;
  const int64_t nv = layout.rows_of(SegmentKind::cond) + layout.rows_of(SegmentKind::video);
  const int64_t na = layout.rows_of(SegmentKind::audio);
  Residual x;
  auto allocate_x = [&] {
    if (host) {
      x.memory = host->tensor(DType::bf16, {layout.seq_len, hidden}, "residual x (host-staged)");
      x.rows.emplace(x.memory.view, arena, *queue,
                     ResidualRows::slot_rows_for(layout.seq_len, opt.kv_chunk, opt.q_chunk,
                                                 opt.mlp_chunk, opt.merge_tail_below));
    } else {
      x.memory = arena.tensor(DType::bf16, {layout.seq_len, hidden}, "residual x");
      x.rows.emplace(x.memory.view);
    }
  };
  OwnedTensor video, audio;  // whole-span embeds (embed_chunk = 0)
  if (embed_chunk == 0) {
    video = arena.tensor(DType::bf16, {nv, hidden}, "video patch embed");
    ResidualRows v(video.view);
    embed_patches(be, arena, w.video_patch, in.video_rows, 0, v, {0, nv}, 0, 0,
                  "video patch embed");
    audio = arena.tensor(DType::bf16, {na, hidden}, "audio patch embed");
    ResidualRows a(audio.view);
    embed_patches(be, arena, w.audio_patch, in.audio_rows, 0, a, {0, na}, 0, 0,
                  "audio patch embed");
  } else {
    allocate_x();
  }
  OwnedTensor text_in;
  OwnedTensor text = embed_text(be, arena, feed, layout, in, text_in);
  arena.mark(-1, Phase::embed);
  if (!x.memory) allocate_x();
  int64_t voff = 0, aoff = 0;
  for (const Segment& s : layout.segments) {
    const RowRange dst{s.begin, s.end};
    auto copy_in = [&](const Tensor& src) {
      const ResidualRows::Lease xr = x.rows->fetch(dst, /*load=*/false);
      be.copy(src, xr.view);
      x.rows->store(xr, dst);
    };
    if (s.kind == SegmentKind::text) {
      copy_in(text.view);
    } else if (s.kind == SegmentKind::audio) {
      if (audio)
        copy_in(audio.view.rows_view(aoff, aoff + s.size()));
      else
        embed_patches(be, arena, w.audio_patch, in.audio_rows, aoff, *x.rows, dst, embed_chunk,
                      opt.merge_tail_below, "audio patch embed chunk");
      aoff += s.size();
    } else {  // cond and video rows follow segment order in the video embed
      if (video)
        copy_in(video.view.rows_view(voff, voff + s.size()));
      else
        embed_patches(be, arena, w.video_patch, in.video_rows, voff, *x.rows, dst, embed_chunk,
                      opt.merge_tail_below, "video patch embed chunk");
      voff += s.size();
    }
  }
  if (!opt.trim_forward) {  // keep what ComfyUI's _forward keeps alive
    for (OwnedTensor* t : {&text_in, &text, &video, &audio})
      if (*t) kept.push_back(std::move(*t));
  }
  return x;
}

}  // namespace

ForwardOutputs run_forward(Backend& be, Arena& arena, const ModelWeights& w,
                           const PackedLayout& layout, const ForwardInputs& in,
                           const ExecOptions& opt, const ProgressFn& progress,
                           const BlockTap& tap) {
  opt.validate();
  be.use_kernels(opt.attn_kernel, opt.gemm_kernel);  // before the planner asks the backend
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

  // One device budget for activations and weights, and the host staging
  // the placement needs (exec/placement_setup.hpp).
  PlacementSetup setup = PlacementSetup::for_forward(be, w, layout, opt);
  out.placement = setup.placement();
  out.activation_estimate = out.placement.device_peak;
  report("placement: " + out.placement.describe());
  const size_t weight_budget =
      opt.vram_budget == 0 ? 0 : size_t(opt.vram_budget) - out.placement.device_peak;
  out.weights = plan_weights(be, w, weight_budget);
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
  const Placement& place = out.placement;
  Arena* const host = setup.host();
  StageQueue* const queue = setup.queue();

  arena.mark(-1, Phase::embed);
  report("embed + refiner");
  std::vector<OwnedTensor> kept_embeds;
  Residual x = pack_sequence(be, arena, feed, layout, in, opt, place.embed_chunk,
                             place.x_on_host ? host : nullptr, queue, kept_embeds);

  OwnedTensor adaln_in = adaln_input(be, arena, wx, layout.timesteps);
  OwnedTensor rope = arena.tensor(DType::bf16, {seq, c.rope_dim / 2, 2}, "RoPE table");
  {
    const std::vector<uint16_t> table = rope_table(layout, w.rope_inv_freq, c.rope_dim);
    be.upload(table.data(), rope.view);
  }

  const bool streamed = place.streamed;
  StreamChunks chunks = setup.chunks(opt);
  chunks.exact_rows = exact_query_rows(opt, layout);
  KvMixHeads kv_mix;  // kvmix: each block's heads on 8 bits
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
    if (tap) {
      if (x.rows->staged())
        fail(ErrorKind::invalid_argument,
             "a block tap needs the whole residual x on the backend, but this forward's placement "
             "stages it in host memory; raise the budget");
      if (!tap(i, view, x.rows->resident())) {
        out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        out.peak_bytes = arena.peak();
        out.ledger = arena.ledger();
        return out;
      }
    }
    chunks.kv_mix_heads = kv_mix.for_block(be, arena, view, *x.rows, opt);
    if (opt.kv_store == KvTier::kvmix) out.kv_mix_heads[int(i)] = chunks.kv_mix_heads;
    if (i == 0 && opt.self_check)
      out.log.push_back(self_check_block(be, arena, view, x.rows->resident(), opt,
                                         chunks.exact_rows, chunks.kv_mix_heads)
                            .line(seq));
    if (streamed) {
      run_block_streamed(be, arena, view, *x.rows, chunks);
      ++out.streamed_blocks;
    } else {
      const BlockKv kv{opt.kv_store, chunks.exact_rows, chunks.kv_mix_heads};
      run_block_stock(be, arena, view, x.rows->resident(), BlockPhases::all, kv);
      ++out.stock_blocks;
    }
    feed.done_block(i);
  }

  arena.mark(-1, Phase::final);
  report("final layer");
  const int64_t fchunk = opt.mode == ExecMode::stock ? 0 : opt.final_layer_chunk;
  FinalOutputs f = run_final_layer(be, arena, wx, layout, *x.rows, adaln_in.view, fchunk,
                                   place.final_gemm, opt.merge_tail_below);
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
  if (queue) out.staging = queue->traffic();
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
