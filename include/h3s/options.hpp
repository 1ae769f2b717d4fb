// h3s::Options: every control of docs/FEATURES.md "Controls", with its
// defaults. Exactness never depends on any of them: a streamed run equals
// the stock run bit for bit whatever they are.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "h3s/kv_tier.hpp"

namespace h3s {

enum class FinalLayerGemm : uint8_t {
  exact,     // one head GEMM over the whole span (chunked norm/mod/promote)
  streamed,  // one head GEMM per chunk
};
std::string_view final_gemm_name(FinalLayerGemm g);
FinalLayerGemm parse_final_gemm(std::string_view s);

enum class ExecMode : uint8_t { stock, streamed };

// Where the streamed block's K/V store lives (exec/placement.hpp).
enum class KvPlacement : uint8_t {
  automatic,  // on the device when the forward fits vram_budget so, else host-staged
  device,     // always on the device
  host,       // always host-staged (pinned memory; streamed in kv_block tiles)
};
std::string_view kv_placement_name(KvPlacement p);
KvPlacement parse_kv_placement(std::string_view s);

// Which attention kernels a GPU backend runs (src/backend/cuda/kernel_choice.hpp
// is the table, docs/PERFORMANCE.md the measurements). automatic is what runs
// in production; the others are for comparison runs (h3s bench, kvbench). Each
// gives its own bits, and streamed == stock within each. The CPU backend has one
// kernel per op and ignores it.
enum class AttnKernel : uint8_t {
  automatic,      // per tier, the kernel chosen for this GPU
  sm80,           // the mma.sync route every other GPU takes, also on Hopper: the exact
                  // mma.sync kernel, kvi8s' mma.sync kernel (8.9+), kvi8r's and kvfp4s'
                  // decode paths onto the exact one
  sm90,           // each tier's own Hopper kernel (kvfp4s': instead of its decode path);
                  // Hopper only
  sm80_one_slab,  // sm80 with the exact mma.sync kernel's one-slab tile, what A100 and RTX
                  // cards run, on any GPU (Hopper picks two slabs a warp; the same bits)
};
// "default", "sm80", "sm90", "sm80-1slab": the names the CLI takes.
std::string_view attn_kernel_name(AttnKernel k);
AttnKernel parse_attn_kernel(std::string_view s);

// Which GEMMs a GPU backend runs, as AttnKernel. All of them give the same bits.
enum class GemmKernel : uint8_t {
  automatic,  // the GEMMs chosen for this GPU
  sm80,       // what RTX 30/40 cards run: bf16 and int8 on mma.sync, W4A8 in two stages
};
// "default", "sm80".
std::string_view gemm_kernel_name(GemmKernel k);
GemmKernel parse_gemm_kernel(std::string_view s);

struct ExecOptions {
  ExecMode mode = ExecMode::streamed;
  int64_t q_chunk = 16384;     // query rows per attention call (balanced)
  int64_t kv_chunk = 16384;    // rows per projection chunk while building K/V
  int64_t mlp_chunk = 16384;   // rows per MLP chunk; 0 = MLP over the whole sequence
  int64_t min_tokens = 32768;  // below this packed length, blocks run stock
  // K/V rows per attention pass, a multiple of the 128-key tile; with a
  // host-staged store the staging tile (0 = one pass; staged: the planner's).
  int64_t kv_block = 0;
  int64_t final_layer_chunk = 16384;  // rows per output-head chunk; 0 = stock
  FinalLayerGemm final_layer_gemm = FinalLayerGemm::exact;
  // The K/V tier (h3s/kv_tier.hpp); the CLI, the C ABI and Python take its name
  // (parse_kv_tier).
  KvTier kv_store = KvTier::bf16;
  // kvmix: the heads kept on 8 bits (kvi8s), the others on 4 (kvfp4s), the
  // same for every block; empty: calibrated per block on its first call
  // (kvfmt/kvmix.hpp), kv_mix_count heads (0: half of them, 28 of H3's 56).
  std::vector<int> kv_mix_heads;
  int64_t kv_mix_count = 0;
  // With an approximate kv_store: text and audio query rows attend a retained
  // exact bf16 K/V (their attention rows are the exact store's, bit for bit).
  bool exact_av_rows = false;
  bool trim_forward = true;  // release embed buffers once the sequence is packed
  bool self_check = false;   // block 0: stock vs streamed variants, one log line
  // Tails shorter than this merge into the previous kv/mlp chunk (the reference
  // node's rule; 0 keeps every tail, which tests use to hit 1-row chunks).
  int64_t merge_tail_below = 512;
  // Device bytes the forward may hold: its weights plus its activations (0: no
  // limit). Weights stay resident when they fit beside the activation estimate,
  // otherwise stream block by block (exec/weight_feed.hpp).
  uint64_t vram_budget = 0;
  KvPlacement kv_placement = KvPlacement::automatic;
  // Host staging bytes (pinned on CUDA) the forward may hold (0: the memory
  // the machine has available at the call, less a tenth).
  uint64_t host_budget = 0;
  // The kernels of a GPU backend, for comparison runs (default: automatic).
  AttnKernel attn_kernel = AttnKernel::automatic;
  GemmKernel gemm_kernel = GemmKernel::automatic;

  // Throws Error(invalid_argument) naming the control, its value and the range.
  void validate() const;
  // The options of the stock path (whole sequence everywhere, ComfyUI-like).
  static ExecOptions stock();
};

using Options = ExecOptions;  // the public name

}  // namespace h3s
