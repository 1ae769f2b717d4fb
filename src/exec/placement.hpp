// Placement: where a forward's O(N) activation buffers live and how big its
// chunks are, decided before any work from the device and host budgets, with
// the device peak it predicts per phase (docs/DESIGN.md, invariant 4).
//
// Decisions, cheapest first until the budget holds:
//  - patch embeds: in kv_chunk-row chunks straight into x on the streamed
//    path (no fp32 [N, features] buffer); whole spans on the stock path;
//  - the final layer's head GEMM: exact (one fp32 span) unless only the
//    streamed per-chunk GEMM fits (the two are bit-equal);
//  - the K/V store: resident on the device, or host-staged (kv/kv_staged.hpp)
//    with kv_block-key tiles and q_group query chunks per pass over it;
//  - refused, naming the minimum and the knob, when nothing fits.
//  - the residual x: resident, or (when the staged K/V still do not fit)
//    host-staged, each chunk copied in for its ops and back out after
//    (exec/residual_rows.hpp);
// Every placement is bit-identical to every other: they change where bytes
// live and the order of independent work, never an operation.
//
// Predictions mirror the executors' arena allocations (exec/forward.cpp,
// streamed_block.cpp, stock_block.cpp, final_layer.cpp): an upper estimate,
// tested against the measured ledger on the CPU backend.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "backend/device_rates.hpp"
#include "core/host_memory.hpp"  // available_host_memory: the host budget's default
#include "h3s/options.hpp"
#include "model/config.hpp"
#include "model/packed_layout.hpp"

namespace h3s {

// What the backend allocates beside the executors' buffers, per row of an
// op: the int8 path's quantised rows and row scales (CUDA, quantised
// weights) and the per-row modulation index (CUDA). The CPU backend keeps
// both off the arena. Defaults: the most a backend takes.
struct ScratchModel {
  bool quant_rows = true;
  bool mod_index = true;
  // The CUDA backend's eager SwiGLU for bf16 (and dequantised NVFP4) fc2
  // takes its activations [rows, ffn] bf16 from the arena, beside f and y.
  // (The defaults are the CUDA backend's for the quantised formats.)
  bool swiglu_rows = false;
  // The options' K/V tier on this backend: false when it has no kernels for
  // it and runs the exact store instead (kv/kv_store.cpp), whose bytes the
  // planner then counts.
  bool kv_tier_runs = true;
  // Keys of every head the backend decodes into 16-bit scratch at once, K and
  // V, during the tier's attention (Backend::kv_tier_decode_keys).
  int64_t kv_decode_keys = 0;
};

class Backend;
struct BlockWeights;
struct ModelWeights;
// Device bytes of the K/V store of options' tier for `seq` rows (the exact
// bf16 store, or an approximate tier's codes and scales).
size_t kv_store_bytes(const ExecOptions& options, int64_t seq, int64_t heads, int64_t head_dim);

// The scratch `backend` takes for `weights` with K/V tier `kv_store`:
// quantised rows only when a block linear is quantised (the fp32 islands and
// bf16 layers take none), the tier's decode blocks where it decodes.
ScratchModel scratch_model(const Backend& backend, const ModelWeights& weights, KvTier kv_store);
// The same for one block's weights (a block call's, e.g. ComfyUI's own arrays).
ScratchModel scratch_model(const Backend& backend, const BlockWeights& block, KvTier kv_store);

struct Placement {
  // Decisions.
  bool streamed = false;    // blocks run streamed (else stock)
  int64_t embed_chunk = 0;  // patch-embed rows per chunk (0: whole spans)
  bool kv_on_host = false;  // host-staged K/V store
  int64_t kv_block = 0;     // keys per K/V block (staged: the tile; 0: one pass)
  int64_t q_group = 1;      // query chunks per pass over the K/V
  // Staged K/V: the first query group attends each K/V chunk during phase 1
  // (StreamChunks::kv_first_pass): one pass fewer over the bus, phase 1's
  // copies out hidden under it, its Q and state held through phase 1.
  bool kv_first_pass = false;
  bool x_on_host = false;  // the residual x host-staged (chunks leased in and out)
  FinalLayerGemm final_gemm = FinalLayerGemm::exact;
  // Predicted device (arena) peaks per phase, bytes; device_peak is their max.
  size_t embed_peak = 0, kv_peak = 0, attn_peak = 0, mlp_peak = 0, final_peak = 0;
  size_t device_peak = 0;
  // Bytes live through every block phase: x, the RoPE table, the adaLN
  // input, one block's modulation (a block's own activations are a phase
  // peak less this).
  size_t block_live = 0;
  // The block phases' peak less what a caller of single blocks holds itself
  // (x, the RoPE table, the adaLN input): h3stream's own bytes per block call.
  size_t block_own = 0;
  // Of every phase peak, what such a caller holds: x, the RoPE table, the
  // adaLN input (a phase's own bytes are its peak less this).
  size_t caller_held = 0;
  // Host staging bytes (pinned on CUDA) the placement holds at once.
  size_t host_bytes = 0;
  // K/V bytes each block moves over the bus: out once, in once per group
  // (but the first, with kv_first_pass).
  size_t kv_to_host_per_block = 0, kv_to_device_per_block = 0;
  // Residual bytes each block moves with host-staged x: in four times (the
  // K/V, Q and out-proj reads, the MLP; three when groups of one keep their
  // rows from Q to the out-proj), out twice (the two residual updates).
  size_t x_to_host_per_block = 0, x_to_device_per_block = 0;

  std::string describe() const;
};

// What a budget covers: the whole forward's activations, or the own
// allocations of one block call on caller-held x (the ComfyUI node).
enum class PlanScope : uint8_t { forward, block };

// The placement for `options` within `device_budget` activation bytes and
// `host_budget` staging bytes (0: unlimited). Throws Error(out_of_memory)
// naming the minimum and the knob when no placement fits, and
// Error(invalid_argument) when options.kv_placement forces one that cannot
// run (host-staged K/V on the stock path). `rates` order the staged
// placements that fit (the backend's, Backend::rates; a plan made without
// one takes the H200's).
Placement plan_placement(const ModelConfig& config, const PackedLayout& layout,
                         const ExecOptions& options, size_t device_budget, size_t host_budget,
                         ScratchModel scratch = {}, PlanScope scope = PlanScope::forward,
                         const DeviceRates& rates = kH200Rates);

// The predicted peaks of one placement's decisions (fills the peak fields).
Placement predict(const ModelConfig& config, const PackedLayout& layout, const ExecOptions& options,
                  Placement decisions, ScratchModel scratch = {});

// The placement with the smallest device peak that `options` allow (staged
// K/V in 128-key tiles one query chunk at a time, the streamed head GEMM):
// the activation minimum a refusal names.
Placement smallest_placement(const ModelConfig& config, const PackedLayout& layout,
                             const ExecOptions& options, ScratchModel scratch = {});

// The activation peak of the placement plan_placement picks without budgets
// (the all-resident one): what the weights planner sets aside.
size_t estimate_activation_peak(const ModelConfig& config, const PackedLayout& layout,
                                const ExecOptions& options, ScratchModel scratch = {});

}  // namespace h3s
