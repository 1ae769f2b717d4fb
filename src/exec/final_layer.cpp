// Final layer executor (see final_layer.hpp).
#include "exec/final_layer.hpp"

#include "exec/block_steps.hpp"
#include "exec/time_embed.hpp"

namespace h3s {

namespace {

OwnedTensor head_segment(Backend& be, Arena& arena, const ModelWeights& w, ResidualRows& x,
                         const Segment& seg, int32_t t_row, const ModTable& mod,
                         const QuantLinear& head, int64_t chunk, FinalLayerGemm gemm,
                         int64_t merge_tail_below) {
  const int64_t n = seg.size(), hidden = x.cols();
  OwnedTensor out = arena.tensor(DType::f32, {n, head.out}, "output head rows");
  if (n == 0) return out;
  const Tensor norm = norm_tensor(w.final_layer.norm);
  const bool whole_gemm = chunk == 0 || gemm == FinalLayerGemm::exact;
  OwnedTensor promoted;
  if (whole_gemm) promoted = arena.tensor(DType::f32, {n, hidden}, "final layer fp32 span");
  for (const RowRange& r : ChunkPlan::fixed(n, chunk, merge_tail_below).chunks) {
    const ModRun run{0, r.size(), t_row};
    OwnedTensor h = arena.tensor(DType::bf16, {r.size(), hidden}, "final norm+mod");
    {
      const RowRange rows{seg.begin + r.begin, seg.begin + r.end};
      const ResidualRows::Lease xr = x.fetch(rows);
      be.rms_norm_mod(xr.view, norm, w.config.eps, &mod, {&run, 1}, h.view);
    }
    if (whole_gemm) {
      be.convert(h.view, promoted.view.rows_view(r.begin, r.end));
    } else {
      OwnedTensor hf = arena.tensor(DType::f32, {r.size(), hidden}, "final fp32 chunk");
      be.convert(h.view, hf.view);
      be.linear(hf.view, head, out.view.rows_view(r.begin, r.end));
    }
  }
  if (whole_gemm) be.linear(promoted.view, head, out.view);
  return out;
}

}  // namespace

FinalOutputs run_final_layer(Backend& be, Arena& arena, const ModelWeights& w,
                             const PackedLayout& layout, ResidualRows& x, const Tensor& adaln_in,
                             int64_t chunk, FinalLayerGemm gemm, int64_t merge_tail_below) {
  const int64_t hidden = w.config.hidden;
  OwnedTensor mods = adaln_project(be, arena, w.final_layer.adaln, adaln_in, "final adaln");
  const ModTable mod{mods.view.cols_view(0, hidden), mods.view.cols_view(hidden, 2 * hidden)};
  FinalOutputs out;
  out.video = head_segment(be, arena, w, x, layout.video, layout.video_t_row, mod,
                           w.final_layer.video_out, chunk, gemm, merge_tail_below);
  out.audio = head_segment(be, arena, w, x, layout.audio, layout.audio_t_row, mod,
                           w.final_layer.audio_out, chunk, gemm, merge_tail_below);
  return out;
}

}  // namespace h3s
