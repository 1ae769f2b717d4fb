// The placement planner (see placement.hpp). Each estimate names the buffers
// of the executor it mirrors, and the backend scratch of ScratchModel.
#include "exec/placement.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <sstream>
#include <vector>

#include "backend/backend.hpp"
#include "core/arena.hpp"
#include "core/chunk_plan.hpp"
#include "core/error.hpp"
#include "exec/exact_rows.hpp"
#include "exec/residual_rows.hpp"
#include "kv/kv_tier_table.hpp"
#include "kvfmt/kvmix.hpp"
#include "model/weights.hpp"

namespace h3s {

namespace {

size_t rows_bytes(int64_t rows, int64_t bytes_per_row) {
  return size_t(std::max<int64_t>(rows, 0)) * size_t(std::max<int64_t>(bytes_per_row, 0));
}

// Staged K/V block sizes the planner tries, largest first. Larger blocks
// mean fewer round trips of the query chunks' states (staged_seconds) but
// four tiles of 14 KB a key at full width (940 MB at 16384, 235 MB at
// 4096), so the steps between are fine (1024 keys, 57 MB at full width)
// for a budget to be filled; 128 keys (one attention tile) is the least
// that runs.
constexpr int64_t kLargestStagedBlock = 16384, kStagedBlockStep = 1024;
constexpr auto kStagedBlocks = [] {
  std::array<int64_t, kLargestStagedBlock / kStagedBlockStep + 3> b{};
  size_t i = 0;
  for (int64_t kb = kLargestStagedBlock; kb >= kStagedBlockStep; kb -= kStagedBlockStep)
    b[i++] = kb;
  for (int64_t kb = kStagedBlockStep / 2; kb >= kAttnKvTile; kb /= 2) b[i++] = kb;
  return b;
}();
static_assert(kStagedBlocks.back() == kAttnKvTile, "the list ends at one attention tile");

// Whether phase 1 may attend the first query group (StreamChunks::
// kv_first_pass): every K/V chunk must start on an attention tile.
bool kv_chunks_on_tiles(const ExecOptions& o) {
  return o.kv_chunk % kAttnKvTile == 0;
}

// The attention phase's time under a staged K/V placement, estimated with
// the device's rates (only the order of the candidates matters): the
// kernel's work plus the online-softmax state's round trip through memory
// at every K/V block (fp32 acc read and written per query row), against the
// bytes the phase moves over the bus (K/V once per pass; a staged x in and
// out once, and in once more for groups of several chunks), which hide
// under the compute while they are shorter.
double staged_seconds(const ModelConfig& c, const PackedLayout& l, const Placement& p,
                      const DeviceRates& rates) {
  const double S = double(l.seq_len), I = double(c.inner());
  const double blocks = std::ceil(S / double(std::max<int64_t>(p.kv_block, 1)));
  const double compute =
      4 * S * S * I / rates.attention_flops + S * 8 * I * blocks / rates.state_bytes_per_s;
  const double x_copies = p.x_on_host ? (p.q_group == 1 ? 2 : 3) : 0;
  const double bus = double(p.kv_to_device_per_block) + x_copies * S * double(c.hidden) * 2;
  // Without kv_first_pass, phase 2 waits for phase 1's copies out, which
  // outlast its compute (~0.18 s against 0.08 s at 217k on the H200): count
  // them whole.
  const double phase1 =
      p.kv_first_pass ? 0 : double(p.kv_to_host_per_block) / rates.bus_bytes_per_s;
  return std::max(compute, bus / rates.bus_bytes_per_s) + phase1;
}

}  // namespace

size_t kv_store_bytes(const ExecOptions& o, int64_t seq, int64_t heads, int64_t head_dim) {
  // exact_av_rows keeps the exact bf16 K/V beside an approximate store.
  const size_t exact = exact_rows_store_bytes(o, seq, heads, head_dim);
  // kvmix: the calibrated count when no set is given, and the gathers of one chunk.
  const int64_t h8 = !o.kv_mix_heads.empty() ? int64_t(o.kv_mix_heads.size())
                     : o.kv_mix_count > 0    ? std::min(o.kv_mix_count, heads)
                                             : kvmix::default_8bit_count(heads);
  return exact + kv_tier_row(o.kv_store)
                     .store_bytes({.seq = seq,
                                   .heads = heads,
                                   .head_dim = head_dim,
                                   .mix_count = h8,
                                   .chunk_rows = std::min(seq, std::max(o.q_chunk, o.kv_chunk))});
}

namespace {

// The tier's part of the scratch model (the weights' parts are set apart).
ScratchModel tier_scratch(const Backend& be, KvTier kv_store) {
  return {.quant_rows = false,
          .mod_index = be.arena_scratch(),
          .swiglu_rows = false,
          .kv_tier_runs = be.has_kv_tier(kv_store),
          .kv_decode_keys = be.has_kv_tier(kv_store) ? be.kv_tier_decode_keys(kv_store) : 0};
}

}  // namespace

ScratchModel scratch_model(const Backend& be, const BlockWeights& b, KvTier kv_store) {
  ScratchModel s = tier_scratch(be, kv_store);
  if (be.arena_scratch()) {
    for (const QuantLinear* l : {&b.attn.qkv, &b.attn.out, &b.mlp.fc1, &b.mlp.fc2})
      s.quant_rows = s.quant_rows || l->format != WeightFormat::bf16;
    s.swiglu_rows =
        b.mlp.fc2.format == WeightFormat::bf16 || b.mlp.fc2.format == WeightFormat::nvfp4;
  }
  return s;
}

ScratchModel scratch_model(const Backend& be, const ModelWeights& w, KvTier kv_store) {
  ScratchModel s = tier_scratch(be, kv_store);
  for (const BlockWeights& b : w.blocks) {
    const ScratchModel block = scratch_model(be, b, kv_store);
    s.quant_rows = s.quant_rows || block.quant_rows;
    s.swiglu_rows = s.swiglu_rows || block.swiglu_rows;
  }
  return s;
}

Placement predict(const ModelConfig& c, const PackedLayout& l, const ExecOptions& o, Placement p,
                  ScratchModel scratch) {
  const int64_t S = l.seq_len, H = c.hidden, I = c.inner(), F = c.ffn, heads = c.heads;
  const int64_t nv = l.rows_of(SegmentKind::cond) + l.rows_of(SegmentKind::video);
  const int64_t na = l.rows_of(SegmentKind::audio), nt = l.text_len;
  const int64_t T = int64_t(l.timesteps.size());
  const int64_t merge = std::max<int64_t>(o.merge_tail_below - 1, 0);
  auto chunk = [&](int64_t c0) { return c0 == 0 ? S : std::min(S, c0 + merge); };

  // Per-row bytes of one chunk of each phase: norm output h, projections,
  // outputs, the int8 scratch and the CUDA backend's modulation-row index.
  const int64_t q = scratch.quant_rows ? 1 : 0;
  const int64_t scratch_h = q * (H + 4), scratch_i = q * (I + 4), scratch_f = q * (F + 4);
  const int64_t mod_index = scratch.mod_index ? 2 * 4 : 0;
  // A host-staged x holds two slots of the largest chunk (exec/residual_rows.hpp);
  // a fetch larger than a slot (the text span, a final-layer chunk) leases
  // its rows from the arena beside the ops: `lease(rows)` bytes per row.
  const int64_t slot_rows =
      p.x_on_host
          ? ResidualRows::slot_rows_for(S, o.kv_chunk, o.q_chunk, o.mlp_chunk, o.merge_tail_below)
          : 0;
  const auto lease = [&](int64_t rows) { return p.x_on_host && rows > slot_rows ? H * 2 : 0; };
  // A query chunk of a group: Q and the state (m, l, fp32 acc), held from
  // its Q projection until it is finished. Beside the others: the norm
  // output while its Q is made, the attention output while it is finished,
  // then the attention output and the out-proj output once its own Q and
  // state are gone.
  const int64_t q_state_row = I * 2 + heads * 8 + I * 4;
  const int64_t attn_row = std::max({q_state_row + I * 2, H * 2 + I * 2 + scratch_h + mod_index,
                                     I * 2 + H * 2 + scratch_i + mod_index});
  // fc1 reads h into f, then fc2 reads f into y: f with h or with y (and
  // with the SwiGLU activations where the backend makes them in the arena).
  const int64_t swiglu = scratch.swiglu_rows ? F * 2 : 0;
  const int64_t mlp_row = 2 * F * 2 + H * 2 + std::max({scratch_h, scratch_f, swiglu}) + mod_index;
  // The stock block (stock_block.cpp): h and the fused QKV; then QKV, the
  // attention output and the state; then the output, out-proj and scratch.
  const int64_t stock_kv_row = H * 2 + 3 * I * 2 + scratch_h + mod_index;
  const int64_t stock_attn_row =
      std::max(3 * I * 2 + I * 2 + heads * 8 + I * 4, I * 2 + H * 2 + scratch_i + mod_index);

  // Live through the blocks: x, the RoPE table, the adaLN input and one
  // block's modulation table; the text embeds too unless trim_forward drops
  // them, and the whole-span patch embeds on the stock path.
  const size_t kept = o.trim_forward ? 0
                                     : rows_bytes(nt, c.text_dim * 2 + H * 2) +
                                           (p.embed_chunk == 0 ? rows_bytes(nv + na, H * 2) : 0);
  // The adaLN input [T, time_dim] bf16 lives through the blocks beside one
  // block's modulation table [T, 18 * hidden] bf16 (the curve form's fp32
  // projection is transient, in the block's setup).
  const size_t adaln_in = rows_bytes(T, c.time_dim * 2), mods = rows_bytes(T, 18 * H * 2);
  const size_t x_dev = p.x_on_host ? ResidualRows::slot_bytes(slot_rows, H) : rows_bytes(S, H * 2);
  const size_t base = x_dev + rows_bytes(S, c.rope_dim * 2) + adaln_in + kept;
  const size_t setup = base + mods + rows_bytes(T, 18 * H * 4);
  p.block_live = base + mods;
  // The store the tier's backend makes (the exact one where it has no
  // kernels), and what it decodes at once into scratch during attention.
  const bool approximate = !kv_tier_exact(o.kv_store) && scratch.kv_tier_runs;
  const auto store_bytes = [&](int64_t seq) {
    return scratch.kv_tier_runs ? kv_store_bytes(o, seq, heads, c.head_dim)
                                : rows_bytes(seq, 2 * I * 2);
  };
  const size_t decode =
      approximate ? rows_bytes(std::min(S, scratch.kv_decode_keys), 2 * I * 2) : 0;

  if (p.streamed) {
    const int64_t n_q = int64_t(ChunkPlan::balanced(S, o.q_chunk).chunks.size());
    const int64_t q_rows = n_q == 0 ? 0 : (S + n_q - 1) / n_q;
    const int64_t group = std::clamp<int64_t>(p.q_group, 1, std::max<int64_t>(n_q, 1));
    const size_t store = store_bytes(S);
    const size_t kv_dev = p.kv_on_host ? 0 : store;
    const size_t tiles = p.kv_on_host ? size_t(4) * rows_bytes(std::min(S, p.kv_block), I * 2) : 0;
    p.kv_first_pass = p.kv_first_pass && p.kv_on_host && kv_chunks_on_tiles(o);
    // Phase 1 chunk by chunk: h and the chunk's K,V buffer; staged K/V keep
    // the previous chunk's buffer beside them until its copies ran, unless
    // the first group rides along (its buffer is returned first, and the
    // group's Q and states are live: before phase 1 its Q projections, as
    // in phase 2).
    const int64_t kv_chunk_row = H * 2 + 2 * I * 2 + scratch_h + mod_index;
    size_t kv_chunks = 0;
    int64_t previous = 0;
    for (const RowRange& r : ChunkPlan::fixed(S, o.kv_chunk, o.merge_tail_below).chunks) {
      const bool keeps = p.kv_on_host && !p.kv_first_pass;
      kv_chunks = std::max(kv_chunks, rows_bytes(keeps ? previous : 0, 2 * I * 2) +
                                          rows_bytes(r.size(), kv_chunk_row));
      previous = r.size();
    }
    if (p.kv_first_pass)
      p.kv_peak = base + mods +
                  std::max(rows_bytes(q_rows, (group - 1) * q_state_row + attn_row),
                           rows_bytes(q_rows, group * q_state_row) + kv_chunks);
    else
      p.kv_peak = base + mods + kv_dev + kv_chunks;
    p.attn_peak = base + mods + kv_dev + tiles + decode +
                  rows_bytes(q_rows, (group - 1) * q_state_row + attn_row);
    p.mlp_peak = base + mods + rows_bytes(chunk(o.mlp_chunk), mlp_row);
    const size_t x_bytes = rows_bytes(S, H * 2);
    p.host_bytes = (p.kv_on_host ? store : 0) + (p.x_on_host ? x_bytes : 0);
    // In: phase 1, the attention phase (once a chunk in groups of one, which
    // keep the rows leased from Q to the residual; else twice) and the MLP.
    // Groups of one fetch their rows once (twice for the group attended in
    // phase 1, whose own fetches come between), larger groups twice.
    const size_t first_rows =
        p.kv_first_pass && n_q > 0
            ? rows_bytes(ChunkPlan::balanced(S, o.q_chunk).chunks.front().size(), H * 2)
            : 0;
    p.x_to_device_per_block = !p.x_on_host ? 0
                              : group == 1 ? 3 * x_bytes + first_rows
                                           : 4 * x_bytes;
    p.x_to_host_per_block = p.x_on_host ? 2 * x_bytes : 0;
    p.kv_to_host_per_block = p.kv_on_host ? store : 0;
    p.kv_to_device_per_block =
        p.kv_on_host ? store * size_t((n_q + group - 1) / std::max<int64_t>(group, 1) -
                                      (p.kv_first_pass ? 1 : 0))
                     : 0;
  } else {
    p.kv_peak = base + mods + rows_bytes(S, stock_kv_row);
    // An approximate tier's stock block quantises every row into its store
    // beside the fused QKV (stock_block.cpp); the exact tier reads the QKV.
    p.attn_peak =
        base + mods + rows_bytes(S, stock_attn_row) + (approximate ? store_bytes(S) : 0) + decode;
    p.mlp_peak = base + mods + rows_bytes(S, mlp_row);
  }
  if (o.self_check) {  // block 0 also runs stock on a copy of x
    const size_t stock = rows_bytes(S, std::max({stock_kv_row, stock_attn_row, mlp_row})) +
                         (approximate ? store_bytes(S) : 0) + decode;
    p.attn_peak = std::max(p.attn_peak, base + mods + rows_bytes(S, H * 2) + stock);
  }

  // The embed phase: the text embed and the refiner's stock blocks over the
  // text rows, then x with one patch-embed chunk (fp32 input and output) or
  // the whole-span embeds (their bf16 results beside one fp32 span).
  const size_t text = rows_bytes(nt, c.text_dim * 2 + H * 2);
  const size_t refiner = rows_bytes(nt, std::max({stock_kv_row, stock_attn_row, mlp_row}));
  const int64_t vf = c.video_features(), af = c.audio_latent;
  // The time embedder's transient fp32 buffers run once x exists.
  const size_t time =
      rows_bytes(T, (c.time_freq_dim + c.time_hidden + c.time_dim) * 4 + c.time_dim * 2);
  const size_t packed = x_dev + kept + std::max(time, rows_bytes(S, c.rope_dim * 2) + adaln_in);
  if (p.embed_chunk == 0) {
    // Video's bf16 result, then its fp32 input and output; audio's beside it.
    const size_t video = rows_bytes(nv, H * 2), spans = rows_bytes(nv + na, H * 2);
    p.embed_peak =
        std::max({video + rows_bytes(nv, (vf + H) * 4), spans + rows_bytes(na, (af + H) * 4),
                  spans + text + refiner, spans + text + rows_bytes(S, H * 2), packed});
  } else {
    const int64_t rows = std::min(std::max(nv, na), p.embed_chunk + merge);
    // A chunk: fp32 input and output, then (staged x) the output beside its lease.
    const size_t patch = rows_bytes(rows, std::max((vf + H) * 4, H * 4 + lease(rows)));
    p.embed_peak = std::max({x_dev + text + std::max(refiner, patch),
                             x_dev + text + rows_bytes(nt, lease(nt)), packed});
  }

  // The final layer, video head then audio head (final_layer.cpp): the
  // head's fp32 output, then per chunk the bf16 norm output (with the
  // backend's modulation row index) and either the whole span's fp32 copy
  // (exact head GEMM, stock) or the chunk's. The
  // video output stays while the audio head runs. Its modulation is
  // [T, 2 * hidden] bf16, with an fp32 copy while the curve form projects.
  const int64_t fchunk = p.streamed || o.mode != ExecMode::stock ? o.final_layer_chunk : 0;
  const bool whole = fchunk == 0 || p.final_gemm == FinalLayerGemm::exact;
  auto head = [&](int64_t n, int64_t out_features) {
    const int64_t rows = fchunk == 0 ? n : std::min(n, fchunk + merge);
    return rows_bytes(n, out_features * 4) +
           rows_bytes(rows, H * 2 + mod_index + std::max(lease(rows), whole ? int64_t(0) : H * 4)) +
           (whole ? rows_bytes(n, H * 4) : 0);
  };
  const size_t video_out = rows_bytes(l.video.size(), vf * 4);
  p.final_peak = base + rows_bytes(T, 2 * H * 2) +
                 std::max({rows_bytes(T, 2 * H * 4), head(l.video.size(), vf),
                           video_out + head(l.audio.size(), af)});

  // Small buffers (run tables, per-call host-side copies) stay below this.
  constexpr size_t kSmall = size_t(64) << 10;
  p.device_peak =
      std::max({p.embed_peak, setup, p.kv_peak, p.attn_peak, p.mlp_peak, p.final_peak}) + kSmall;
  p.caller_held = base - kept;
  p.block_own = std::max({p.kv_peak, p.attn_peak, p.mlp_peak}) - p.caller_held + kSmall;
  return p;
}

Placement plan_placement(const ModelConfig& c, const PackedLayout& l, const ExecOptions& o,
                         size_t device_budget, size_t host_budget, ScratchModel scratch,
                         PlanScope scope, const DeviceRates& rates) {
  Placement p;
  p.streamed = o.mode == ExecMode::streamed && l.seq_len >= o.min_tokens;
  p.embed_chunk = o.mode == ExecMode::streamed ? o.kv_chunk : 0;
  p.kv_block = o.kv_block;
  p.final_gemm = o.final_layer_gemm;
  const auto need = [&](const Placement& q) {
    return scope == PlanScope::forward ? q.device_peak : q.block_own;
  };
  const auto fits = [&](const Placement& q) {
    return device_budget == 0 || need(q) <= device_budget;
  };
  if (!p.streamed && o.kv_placement == KvPlacement::host)
    fail(ErrorKind::invalid_argument,
         "kv_placement = host needs the streamed path, but this forward runs stock ({} tokens, "
         "mode {}, min_tokens {}): lower min_tokens or use kv_placement = auto",
         l.seq_len, o.mode == ExecMode::stock ? "stock" : "streamed", o.min_tokens);

  // Query chunks per pass: most first (fewest passes of the K/V over the
  // bus), capped where the group's states would hold more than the K/V
  // store they replace; then the largest staging tile that fits.
  const int64_t n_q = int64_t(ChunkPlan::balanced(l.seq_len, o.q_chunk).chunks.size());
  const size_t store = size_t(l.seq_len) * size_t(c.inner()) * 4;
  const size_t per_chunk =
      size_t((l.seq_len + std::max<int64_t>(n_q, 1) - 1) / std::max<int64_t>(n_q, 1)) *
      size_t(c.inner() * 6 + c.heads * 8);
  const int64_t cap = std::max<int64_t>(1, int64_t(store / std::max<size_t>(per_chunk, 1)));
  std::vector<int64_t> blocks;
  if (o.kv_block > 0)
    blocks.push_back(o.kv_block);
  else
    blocks.assign(kStagedBlocks.begin(), kStagedBlocks.end());

  // The head GEMM as configured first, then the streamed one (bit-equal,
  // one fp32 chunk instead of the span) if that is what it takes.
  std::vector<FinalLayerGemm> gemms{o.final_layer_gemm};
  if (o.final_layer_chunk != 0 && o.mode != ExecMode::stock &&
      o.final_layer_gemm != FinalLayerGemm::streamed)
    gemms.push_back(FinalLayerGemm::streamed);
  // Staging must pay for itself: without a budget (kv_placement = host) a
  // staged placement may hold no more than the resident one would.
  Placement resident_plan = p;
  resident_plan.final_gemm = o.final_layer_gemm;
  const size_t ceiling =
      device_budget != 0 ? device_budget : need(predict(c, l, o, resident_plan, scratch));
  Placement best;
  for (const FinalLayerGemm gemm : gemms) {
    p.final_gemm = gemm;
    p.kv_on_host = false;
    p.kv_block = o.kv_block;
    p.q_group = 1;
    best = predict(c, l, o, p, scratch);
    // (Host staging holds the exact tier only: an approximate tier stays resident.)
    const bool want_host = o.kv_placement == KvPlacement::host ||
                           (o.kv_placement == KvPlacement::automatic && p.streamed &&
                            kv_tier_exact(o.kv_store) && !fits(best));
    if (!want_host) {
      if (fits(best)) break;
      continue;
    }
    // Staged K/V first; the residual x too only when that is not enough (it
    // moves 6 x S x hidden x 2 bytes a block), never for single block calls
    // (the caller owns x) or with self_check (which runs stock on a copy).
    const bool x_may_stage = scope == PlanScope::forward && p.streamed && !o.self_check &&
                             o.kv_placement == KvPlacement::automatic && device_budget != 0;
    // Of the (group, tile) pairs that fit, the one with the least estimated
    // time (staged_seconds); fewer passes on a tie.
    bool found = false;
    double best_s = 0;
    for (const bool x_host : {false, true}) {
      if (found || (x_host && !x_may_stage)) break;
      for (int64_t g = std::min(n_q, cap); g >= 1; --g)
        for (const int64_t kb : blocks)
          for (const bool first_pass : {true, false}) {
            Placement q = p;
            q.kv_on_host = true;
            q.x_on_host = x_host;
            q.kv_block = kb;
            q.q_group = g;
            q.kv_first_pass = first_pass;
            q = predict(c, l, o, q, scratch);
            if (need(q) > ceiling) continue;
            const double t = staged_seconds(c, l, q, rates);
            if (!found || t < best_s) {
              best = q;
              best_s = t;
              found = true;
            }
          }
    }
    if (found) break;
    p.kv_on_host = true;  // the smallest staged placement, for the message
    p.kv_block = blocks.back();
    best = predict(c, l, o, p, scratch);
    if (x_may_stage) {
      p.x_on_host = true;
      const Placement staged = predict(c, l, o, p, scratch);
      if (need(staged) < need(best)) best = staged;
      p.x_on_host = false;
    }
  }
  if (!fits(best)) {
    if (scope == PlanScope::block)
      fail(ErrorKind::out_of_memory,
           "vram_budget {} cannot hold this block call's own memory at {} tokens: its smallest "
           "placement ({}) needs {}; raise vram_budget or lower q_chunk / kv_chunk / mlp_chunk",
           format_bytes(device_budget), l.seq_len, best.describe(), format_bytes(need(best)));
    fail(ErrorKind::out_of_memory,
         "the activation budget {} cannot hold this forward at {} tokens: its smallest placement "
         "({}) needs {}; raise --vram-budget (vram_budget) or lower --q-chunk / --kv-chunk / "
         "--mlp-chunk",
         format_bytes(device_budget), l.seq_len, best.describe(), format_bytes(need(best)));
  }
  if (host_budget != 0 && best.host_bytes > host_budget)
    fail(ErrorKind::out_of_memory,
         "host staging ({}) needs {} of host memory at {} tokens but the host budget is {}: "
         "raise --host-budget (host_budget), free host memory, or give the device more "
         "(--vram-budget) so the K/V store stays resident",
         best.x_on_host ? "K/V and residual" : "K/V", format_bytes(best.host_bytes), l.seq_len,
         format_bytes(host_budget));
  return best;
}

Placement smallest_placement(const ModelConfig& c, const PackedLayout& l, const ExecOptions& o,
                             ScratchModel scratch) {
  Placement p;
  p.streamed = o.mode == ExecMode::streamed && l.seq_len >= o.min_tokens;
  p.embed_chunk = o.mode == ExecMode::streamed ? o.kv_chunk : 0;
  p.kv_block = o.kv_block;
  p.final_gemm = o.final_layer_chunk != 0 && o.mode != ExecMode::stock ? FinalLayerGemm::streamed
                                                                       : o.final_layer_gemm;
  if (p.streamed && o.kv_placement != KvPlacement::device && kv_tier_exact(o.kv_store)) {
    p.kv_on_host = true;
    p.kv_block = o.kv_block > 0 ? o.kv_block : kStagedBlocks.back();
  }
  const Placement kv_only = predict(c, l, o, p, scratch);
  // A staged x holds two chunk slots: smaller than x only when the chunks are
  // short against the sequence.
  if (!p.kv_on_host || o.self_check || o.kv_placement != KvPlacement::automatic) return kv_only;
  p.x_on_host = true;
  const Placement staged = predict(c, l, o, p, scratch);
  return staged.device_peak < kv_only.device_peak ? staged : kv_only;
}

size_t estimate_activation_peak(const ModelConfig& c, const PackedLayout& l, const ExecOptions& o,
                                ScratchModel scratch) {
  ExecOptions resident = o;
  if (resident.kv_placement == KvPlacement::automatic) resident.kv_placement = KvPlacement::device;
  return plan_placement(c, l, resident, 0, 0, scratch).device_peak;
}

std::string Placement::describe() const {
  std::ostringstream s;
  s << (streamed ? "streamed" : "stock");
  if (streamed) {
    s << ", K/V " << (kv_on_host ? "host-staged" : "resident");
    if (kv_on_host)
      s << " (" << kv_block << "-key tiles, " << q_group << " query chunk"
        << (q_group == 1 ? "" : "s") << " a pass" << (kv_first_pass ? ", the first in phase 1" : "")
        << ")";
    if (x_on_host) s << ", x host-staged";
  }
  s << ", patch embeds " << (embed_chunk == 0 ? "whole" : "chunked") << ", head GEMM "
    << final_gemm_name(final_gemm) << "; predicted peak " << format_bytes(device_peak) << " (embed "
    << format_bytes(embed_peak) << ", kv " << format_bytes(kv_peak) << ", attn "
    << format_bytes(attn_peak) << ", mlp " << format_bytes(mlp_peak) << ", final "
    << format_bytes(final_peak) << ")";
  if (host_bytes) s << ", host " << format_bytes(host_bytes);
  return s.str();
}

}  // namespace h3s
