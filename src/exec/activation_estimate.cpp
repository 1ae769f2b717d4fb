// Activation estimate (see activation_estimate.hpp): each term names the
// buffers of the executor it mirrors; int8 scratch (quantised rows + row
// scales) is counted for every linear whatever the format.
#include "exec/activation_estimate.hpp"

#include <algorithm>

namespace h3s {

namespace {

size_t rows_bytes(int64_t rows, int64_t bytes_per_row) {
  return size_t(std::max<int64_t>(rows, 0)) * size_t(std::max<int64_t>(bytes_per_row, 0));
}

}  // namespace

size_t estimate_activation_peak(const ModelConfig& c, const PackedLayout& l, const ExecOptions& o) {
  const int64_t S = l.seq_len, H = c.hidden, I = c.inner(), F = c.ffn, heads = c.heads;
  const int64_t nv = l.rows_of(SegmentKind::cond) + l.rows_of(SegmentKind::video);
  const int64_t na = l.rows_of(SegmentKind::audio), nt = l.text_len;
  const int64_t T = int64_t(l.timesteps.size());
  const bool streamed = o.mode == ExecMode::streamed && S >= o.min_tokens;
  const int64_t merge = std::max<int64_t>(o.merge_tail_below - 1, 0);
  auto chunk = [&](int64_t c0, bool merges) {
    return c0 == 0 ? S : std::min(S, c0 + (merges ? merge : 0));
  };

  // Per-row bytes of one chunk of each phase (exec/streamed_block.cpp,
  // stock_block.cpp, block_steps.cpp): norm output h, projections, the
  // attention state (m, l, fp32 acc), outputs, and the int8 scratch.
  // int8 rows + a row scale per quantised linear input; the CUDA backend's
  // modulation-row index (int32 per row) per modulated op.
  const int64_t scratch_h = H + 4, scratch_i = I + 4, scratch_f = F + 4, mod_index = 2 * 4;
  const int64_t kv_row = H * 2 + 2 * I * 2 + scratch_h + mod_index;
  const int64_t attn_row =
      H * 2 + I * 2 + I * 2 + heads * 8 + I * 4 + H * 2 + scratch_h + scratch_i + mod_index;
  const int64_t mlp_row = H * 2 + 2 * F * 2 + H * 2 + scratch_h + scratch_f + mod_index;
  const int64_t stock_attn_row =
      H * 2 + 3 * I * 2 + I * 2 + heads * 8 + I * 4 + H * 2 + scratch_h + scratch_i + mod_index;
  const size_t kv_store = rows_bytes(S, 2 * I * 2);
  const size_t streamed_block = std::max({kv_store + rows_bytes(chunk(o.kv_chunk, true), kv_row),
                                          kv_store + rows_bytes(std::min(S, o.q_chunk), attn_row),
                                          rows_bytes(chunk(o.mlp_chunk, true), mlp_row)});
  const size_t stock_block = std::max(rows_bytes(S, stock_attn_row), rows_bytes(S, mlp_row));

  // Live through the blocks: x, the RoPE table, the adaLN input and one
  // block's modulation table; the embeds too unless trim_forward drops them.
  const size_t embeds = rows_bytes(nv, c.video_features() * 4 + H * 4 + H * 2) +
                        rows_bytes(na, c.audio_latent * 4 + H * 4 + H * 2) +
                        rows_bytes(nt, c.text_dim * 2 + H * 2);
  const size_t time = rows_bytes(
      T, (c.time_freq_dim + c.time_hidden + c.time_dim) * 4 + c.time_dim * 2 + 18 * H * 2 * 2);
  const size_t base =
      rows_bytes(S, H * 2) + rows_bytes(S, c.rope_dim * 2) + time + (o.trim_forward ? 0 : embeds);
  size_t block = streamed ? streamed_block : stock_block;
  if (o.self_check) block = std::max(block, rows_bytes(S, H * 2) + stock_block);

  // The embed phase: embeds, the refiner's stock blocks over the text rows,
  // then x beside the embeds.
  const size_t refiner = std::max(rows_bytes(nt, stock_attn_row), rows_bytes(nt, mlp_row));
  const size_t embed_phase = embeds + std::max(refiner, rows_bytes(S, H * 2));

  // The final layer (final_layer.cpp): both heads' fp32 outputs, a norm chunk,
  // and the fp32 span (exact GEMM or stock) or one fp32 chunk.
  const int64_t fchunk = o.mode == ExecMode::stock ? 0 : o.final_layer_chunk;
  const int64_t seg = std::max(l.video.size(), l.audio.size());
  const int64_t frows = fchunk == 0 ? seg : std::min(seg, fchunk + merge);
  const bool whole = fchunk == 0 || o.final_layer_gemm == FinalLayerGemm::exact;
  const size_t final_phase = rows_bytes(S, H * 2) + time + (o.trim_forward ? 0 : embeds) +
                             rows_bytes(l.video.size(), c.video_features() * 4) +
                             rows_bytes(l.audio.size(), c.audio_latent * 4) +
                             rows_bytes(frows, H * 2 + H * 4) +
                             (whole ? rows_bytes(seg, H * 4) : 0);

  // Small buffers (run tables, per-call host-side copies) stay below this.
  constexpr size_t kSmall = size_t(64) << 10;
  return std::max({embed_phase, base + block, final_phase}) + kSmall;
}

}  // namespace h3s
