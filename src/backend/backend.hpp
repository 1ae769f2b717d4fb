// Backend: the op interface every executor runs on (docs/DESIGN.md "The op
// interface").
//
// Contract for every op: row invariance. Output row r depends only on input
// row r (plus weights, modulation rows and K/V), never on how many rows share
// the call or where a chunk starts: no algorithm choice by M, no M-dependent
// split of K, a fixed reduction order, attention K/V consumed in fixed tiles.
// `streamed == stock` bit for bit follows from this and is tested on every
// backend.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backend/attn_tile.hpp"
#include "backend/device_rates.hpp"
#include "backend/stage_queue.hpp"
#include "backend/weight_store.hpp"
#include "core/arena.hpp"
#include "core/chunk_plan.hpp"
#include "core/tensor.hpp"
#include "h3s/kv_tier.hpp"
#include "h3s/options.hpp"
#include "model/packed_layout.hpp"
#include "model/quant_linear.hpp"

namespace h3s {

class ThreadPool;

// The most keys any backend decodes at once for `tier` (the figure a plan
// made without a device counts): kvfp4s and kvmix Hopper's, kvi8r the
// default; 0 for a tier no backend decodes.
constexpr int64_t most_kv_decode_keys(KvTier tier) {
  switch (tier) {
    case KvTier::kvfp4s:
    case KvTier::kvmix:
      return kKvDecodeKeysHopper;
    case KvTier::kvi8r:
      return kKvDecodeKeys;
    default:
      return 0;
  }
}

// One block's modulation rows: bf16 views [mod_rows, hidden] (row stride may
// be wider: they are slices of the adaLN projection output).
struct ModTable {
  Tensor shift, scale;
};

// Keys and values as [seq, heads, head_dim] views with arbitrary seq/head
// strides: the stock executor points into its fused QKV buffer, the K/V store
// into its [heads, seq, head_dim] arrays.
struct KvView {
  Tensor k, v;
  int64_t rows() const { return k.shape[0]; }
};

// The kvi8r tier's K/V (kvfmt/kvi8r.hpp): codes [seq, heads * 128] u8 (stored
// biased, code + 128) and fp16
// scales [seq, heads] per (token, head), for K and V. The scales may have any
// strides: KvI8rStore lays them head-major (stride {1, padded seq}).
struct KvI8View {
  Tensor k_code, k_scale, v_code, v_scale;
  int64_t rows() const { return k_code.shape[0]; }
};

// The kvi8s tier's K/V (kvfmt/kvi8s.hpp): K codes [seq, heads * 128] i8 (token
// rows); V codes [heads * 128, padded_seq] e4m3 (each channel's keys, in the
// tile order kvi8s::v_position gives); per (128-token tile, head) one header
// record of kvi8s::kHeaderRows rows, [tiles * heads * kHeaderRows, 128] u8
// (tile T, head h at row (T * heads + h) * kHeaderRows).
struct KvI8sView {
  Tensor k_code, v_code, header;
  int64_t rows() const { return k_code.shape[0]; }
};

// The kvfp4s tier's K/V (kvfmt/kvfp4s.hpp), per token and per 256-token stat
// block b: K and V codes [seq, heads * 64] u8 (two e2m1 a byte), K and V
// scales [seq, heads * 8] e4m3 (one per 16 elements), K and V globals
// [blocks, heads] f32, K means [blocks, heads * 128] bf16 (rotated basis).
struct KvFp4sView {
  Tensor k_code, k_scale, k_global, k_mean, v_code, v_scale, v_global;
  int64_t rows() const { return k_code.shape[0]; }
};

// Online-softmax state of a query chunk: running max m and denominator l per
// (row, head), fp32 accumulator per (row, head, dim). Carried unchanged
// between K/V blocks.
struct AttnState {
  OwnedTensor m, l, acc;
  int64_t rows = 0, heads = 0, head_dim = 0;
  static AttnState allocate(Arena& arena, int64_t rows, int64_t heads, int64_t head_dim);
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;
  // Whether ops take per-row scratch from the activation arena (the int8
  // path's quantised rows, the modulation-row index): the placement
  // planner's predictions count it (exec/placement.hpp ScratchModel).
  virtual bool arena_scratch() const { return false; }
  // The host worker pool of a backend that has one (the CPU backend's, sized
  // by the engine's threads), for host-side work beside its ops (kvmix's
  // calibration); nullptr: the caller brings its own.
  virtual ThreadPool* host_pool() { return nullptr; }

  // out = bf16((x * rstd) * gamma) per row (fp32 math, one rounding); then, if
  // mod is given, per run: bf16(bf16(h * bf16(1 + scale[row])) + shift[row]).
  virtual void rms_norm_mod(const Tensor& x, const Tensor& gamma, float eps, const ModTable* mod,
                            std::span<const ModRun> runs, const Tensor& out) = 0;

  // y = x W^T (+ bias). bf16 in/out for bf16, int8 and w4a8 weights (int8 and
  // w4a8 quantise x per row with ConvRot, multiply exactly in int32 and
  // dequantise as bf16((acc * xs) * ws)); f32 in/out for f32 weights.
  // `features` selects output features [begin, end) of W (empty: all), e.g.
  // only Q of the fused QKV; each output element is the same arithmetic as in
  // the full product, so selecting features never changes bits.
  virtual void linear(const Tensor& x, const QuantLinear& w, const Tensor& y,
                      RowRange features = {}) = 0;

  // y = fc2(SiLU(gate) * up) with f = [gate | up] bf16 [rows, 2 * ffn]. int8
  // fc2 weights take the fused fp32 SwiGLU quantiser (comfy-kitchen's
  // input_act "swiglu"); other formats the eager bf16 SwiGLU then linear.
  virtual void swiglu_linear(const Tensor& f, const QuantLinear& w, const Tensor& y) = 0;

  // In place on t = [rows, heads * 128] bf16 (row stride may be wider): per
  // head RMSNorm with weight w, then split-half RoPE on the first rot_dim dims
  // from rope = [rows, rot_dim / 2, 2] bf16 (cos, sin). rot_dim = 0: norm only.
  virtual void qk_norm_rope(const Tensor& t, const Tensor& w, const Tensor& rope, float eps,
                            int64_t rot_dim) = 0;

  virtual void attn_state_reset(AttnState& s) = 0;
  // Consume keys [keys.begin, keys.end) of kv into the state of the query rows
  // q = [rows, heads * head_dim]; keys.begin must be a multiple of kAttnKvTile.
  virtual void attention(const Tensor& q, const KvView& kv, RowRange keys, AttnState& s) = 0;
  // out = bf16(acc / l), [rows, heads * head_dim].
  virtual void attn_state_finish(const AttnState& s, const Tensor& out) = 0;
  // One attention call with the state's ends folded in, where the backend's
  // kernel can: `fresh` starts from the reset state (without reading it),
  // `out` finishes into out (the state is then left unspecified). The bits
  // are those of attn_state_reset + attention + attn_state_finish, which is
  // what this default runs.
  struct AttnEnds {
    bool fresh = false;
    const Tensor* out = nullptr;
  };
  virtual void attention_with_ends(const Tensor& q, const KvView& kv, RowRange keys, AttnState& s,
                                   AttnEnds ends) {
    if (ends.fresh) attn_state_reset(s);
    attention(q, kv, keys, s);
    if (ends.out != nullptr) attn_state_finish(s, *ends.out);
  }

  // ---- approximate K/V tiers (docs/FEATURES.md "K/V storage tiers") -------
  // The defaults refuse.
  // Whether this backend runs K/V tier `tier` (bf16, the exact store, always).
  virtual bool has_kv_tier(KvTier tier) const { return tier == KvTier::bf16; }
  // Keys (of every head) this backend decodes at once from `tier`'s store
  // into 16-bit scratch on the arena, K and V, when it attends that tier
  // with the exact kernel (the CUDA backend's kvfp4s and kvi8r off Hopper);
  // 0 when it takes no such scratch. The planner counts it (exec/placement.hpp).
  virtual int64_t kv_tier_decode_keys(KvTier /*tier*/) const { return 0; }
  // (kKvDecodeKeys, below, is the CUDA backend's default.)
  // How to make `tier` run here when has_kv_tier says no (empty: no way);
  // the exact-store fallback's note prints it.
  virtual std::string_view kv_tier_hint(KvTier /*tier*/) const { return {}; }
  // kvi8r (kvfmt/kvi8r.hpp is the arithmetic): src [rows, heads * 128] bf16 ->
  // code [rows, heads * 128] u8 (code + 128) and scale [rows, heads] f16 (any strides).
  virtual void kvi8r_quantize(const Tensor& src, const Tensor& code, const Tensor& scale);
  // In place per 128-dim head: t = bf16(rotate(t)) (the tier's queries).
  virtual void rotate_heads(const Tensor& t);
  // attention() over the tier's store; q_rot rotated by rotate_heads.
  virtual void attention_kvi8r(const Tensor& q_rot, const KvI8View& kv, RowRange keys,
                               AttnState& s);
  // out = bf16(rotate(acc / l)): the tier's output, un-rotated once.
  virtual void attn_state_finish_rotated(const AttnState& s, const Tensor& out);
  // kvi8r's dequantisation (kvfmt/kvi8r.hpp): keys [keys.begin, keys.end) of
  // every head as the fp16 K~ = fp16(code x scale) and V~ its attention uses,
  // into k and v ([keys.size(), heads, 128] f16 views). Its decode path
  // (backend/kv_tier_decode.hpp) attends them with attention().
  virtual void kvi8r_decode(const KvI8View& kv, RowRange keys, const Tensor& k, const Tensor& v);
  // kvi8s (kvfmt/kvi8s.hpp): the K and V rows [first_row, first_row + n), given
  // as row-wise parts (e.g. a kept tail and the next chunk), quantised into
  // `out`. first_row is a multiple of 128 (a tile) and n is too unless the rows end the
  // sequence (out.rows()).
  virtual void kvi8s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                              int64_t first_row, const KvI8sView& out);
  // attention() over the kvi8s store; q_rot rotated by rotate_heads (V is
  // not rotated: attn_state_finish gives the output).
  virtual void attention_kvi8s(const Tensor& q_rot, const KvI8sView& kv, RowRange keys,
                               AttnState& s);
  // kvfp4s (kvfmt/kvfp4s.hpp): as kvi8s_quantize, in 256-token stat blocks
  // (first_row a multiple of 256; n too unless the rows end the sequence).
  virtual void kvfp4s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                               int64_t first_row, const KvFp4sView& out);
  // attention() over the kvfp4s store; q_rot rotated by rotate_heads (V is
  // not rotated: attn_state_finish gives the output).
  virtual void attention_kvfp4s(const Tensor& q_rot, const KvFp4sView& kv, RowRange keys,
                                AttnState& s);
  // kvfp4s' decode (kvfmt/kvfp4s.hpp): keys [keys.begin, keys.end) of every
  // head as the bf16 K~ and V~ its attention uses, into k and v ([keys.size(),
  // heads, 128] views). Its decode path (backend/kv_tier_decode.hpp) attends
  // them with attention().
  virtual void kvfp4s_decode(const KvFp4sView& kv, RowRange keys, const Tensor& k, const Tensor& v);

  // Per run: x = bf16(x + y * gate[run.mod_row]) (fp32, one rounding).
  virtual void gated_residual(const Tensor& x, const Tensor& y, const Tensor& gate,
                              std::span<const ModRun> runs) = 0;
  // x = bf16(y + x).
  virtual void add_residual(const Tensor& x, const Tensor& y) = 0;

  // Elementwise: y = SiLU(x) (bf16 or f32, one rounding), dtype conversion
  // (RNE), same-dtype strided copy, and x *= alpha (f32).
  virtual void silu(const Tensor& x, const Tensor& y) = 0;
  virtual void convert(const Tensor& x, const Tensor& y) = 0;
  virtual void copy(const Tensor& x, const Tensor& y) = 0;
  virtual void scale(const Tensor& x, float alpha) = 0;

  // ---- weights (docs/DESIGN.md "Weights: the backend owns them") ------------
  // Every op reads weights prepared for this backend: a QuantLinear or norm
  // vector whose arrays are on its device in the form its kernels read.
  // prepare() makes that form from any source (a mapped file, a host
  // framework's arrays, host or device): a view of the source itself when it
  // already is that form on this device and the residency allows it, or a
  // copy / decode into `store`. It may run on another host thread than the
  // ops (a prefetch worker): it touches only `store` and the source.
  virtual std::unique_ptr<WeightStore> make_weight_store(std::string name, size_t capacity) = 0;
  virtual QuantLinear prepare(const QuantLinear& src, Residency r, WeightStore& store) = 0;
  virtual WeightArray<uint16_t> prepare(const WeightArray<uint16_t>& src, Residency r,
                                        WeightStore& store) = 0;
  // The store bytes prepare(src, r, ...) takes (0 when it views src in place).
  virtual size_t prepared_bytes(const QuantLinear& src, Residency r) const = 0;
  virtual size_t prepared_bytes(const WeightArray<uint16_t>& src, Residency r) const = 0;
  // Ops issued after this see every weight prepared into the sealed `store`
  // (CUDA: the compute stream waits for the store's copies).
  virtual void wait_ready(WeightStore& store) { (void)store; }
  // The ops issued so far are the last readers of `store`'s weights: it may
  // be reset and refilled once they have run (CUDA: later copies wait for them).
  virtual void release(WeightStore& store) { (void)store; }

  // ---- host staging (exec/placement.hpp) ------------------------------------
  // Memory the placement planner stages O(N) buffers in, and queues that copy
  // to and from it (backend/stage_queue.hpp). The memory is the backend's, so
  // its cache lives as long as the backend: CUDA pins it, and pinning
  // gigabytes costs about a second, too much to repeat per block or per call.
  virtual MemoryResource& host_staging_memory() = 0;
  // Device bytes free now (0: not known, e.g. the CPU backend's heap).
  virtual size_t free_device_memory() const { return 0; }
  // Device bytes in use by the driver's count (total - free: the CUDA context,
  // cached pools and every process on the card included; 0: not known). Where
  // a budget is claimed this, not the arena's ledger, is the figure to read.
  virtual size_t device_memory_in_use() const { return 0; }
  // Waits for the device and hands the cached free bytes of its memory pool
  // back to the driver, so readings taken during the next run count only what
  // that run uses (h3s bench samples them: a reading after a run is not its peak).
  virtual void trim_device_cache() {}
  // The throughput figures the planner orders staged placements by. Every
  // backend plans with the H200's today: the CPU backend has none of its own
  // (it makes the GPU's decisions, so CI tests them), and the CUDA backend's
  // only measured device is that one.
  virtual DeviceRates rates() const { return kH200Rates; }
  virtual std::unique_ptr<StageQueue> make_stage_queue() = 0;

  // Host <-> backend memory for the small host-side pieces (timesteps, tables).
  virtual void upload(const void* host, const Tensor& dst) = 0;
  virtual void download(const Tensor& src, void* host) = 0;
  virtual void synchronize() {}
  // Seconds that the work `enqueue` queues takes where it runs: CUDA times
  // it with events on the backend's stream (kernel time, no host launch gaps
  // before the first op); the default syncs and reads the host clock.
  virtual double device_seconds(const std::function<void()>& enqueue);
  // The kernels later ops run where a backend has a choice (ExecOptions::
  // attn_kernel, gemm_kernel: comparison runs). The forward and block
  // entry points pass their options' at every call, so one call's choice
  // never leaks into another's; automatic is the backend's own choice.
  // Backends with one kernel per op ignore it.
  virtual void use_kernels(AttnKernel attn, GemmKernel gemm) {
    (void)attn;
    (void)gemm;
  }
  // The attention kernel this backend runs (benchmarks record it), and the
  // one it runs for K/V tier `tier` (e.g. "decode" for a decode path; the
  // exact store's kernel for bf16 or a tier it lacks).
  virtual std::string_view attention_kernel() const { return "reference"; }
  virtual std::string kv_tier_kernel(KvTier /*tier*/) const { return "reference"; }
  // Queue later ops on a host framework's stream (CUDA: a cudaStream_t; null
  // is the legacy default stream), ordered after the work already queued.
  // Backends without streams ignore it.
  virtual void use_stream(void* stream) { (void)stream; }
};

// A norm weight (prepared for a backend) as the bf16 [n] tensor its ops read.
inline Tensor norm_tensor(const WeightArray<uint16_t>& v) {
  return Tensor::contiguous(const_cast<uint16_t*>(v.data()), DType::bf16, {int64_t(v.size())},
                            v.device());
}

// The CPU reference backend; threads <= 0 uses every hardware thread.
std::unique_ptr<Backend> make_cpu_backend(int threads = 0);

}  // namespace h3s
