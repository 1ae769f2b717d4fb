// Block executors: one DiT (or refiner) block over the residual x [seq, hidden]
// bf16, in place, either whole ("stock", ComfyUI's shape of computation) or in
// three chunked phases ("streamed", docs/FEATURES.md "The streamed block"). Both are compositions
// of the same row-invariant backend ops, so their outputs are equal bit for bit.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "core/arena.hpp"
#include "exec/block_context.hpp"
#include "h3s/options.hpp"

namespace h3s {

// A block as the executors see it: DiT blocks have modulation and RoPE;
// refiner blocks have neither (plain residual adds, q/k norm without RoPE).
struct BlockView {
  const WeightArray<uint16_t>* norm1 = nullptr;
  const WeightArray<uint16_t>* norm2 = nullptr;
  const AttnWeights* attn = nullptr;
  const MlpWeights* mlp = nullptr;
  const BlockMods* mods = nullptr;  // null: refiner block
  Tensor rope;                      // data null: no RoPE
  int64_t rot_dim = 0;
  const std::vector<ModRun>* runs = nullptr;  // absolute mod runs (DiT blocks)
  int64_t heads = 0, head_dim = 128;
  float eps = 1e-5f;
  int block_index = -1;  // for the ledger (-1: not a DiT block)

  static BlockView dit(const BlockWeights& w, const BlockContext& ctx);
  static BlockView refiner(const RefinerBlockWeights& w, const ModelConfig& cfg);
};

// Which phases one block call runs: all, or only the attention half
// (x += gate_msa * attn(...)) for callers that keep the model's own MLP (the
// ComfyUI node's mlp_chunk = 0, through the Python module's phases="attn").
enum class BlockPhases : uint8_t { all, attn_only };

// The K/V of a stock block call: its tier (ExecOptions::kv_store) and the
// query rows attended over the exact bf16 K/V beside an approximate store
// (exact_av_rows: exec/exact_rows.hpp), absolute and sorted; empty: none.
struct BlockKv {
  KvTier tier = KvTier::bf16;
  std::span<const RowRange> exact_rows = {};
  std::span<const int> mix_heads = {};  // kvmix: the heads on 8 bits (exec/kvmix_heads.hpp)
};

// The exact tier attends the fused QKV buffer directly, an approximate tier
// goes through its store as the streamed block does, so the two stay
// bit-equal within a tier.
void run_block_stock(Backend& backend, Arena& arena, const BlockView& block, const Tensor& x,
                     BlockPhases phases = BlockPhases::all, BlockKv kv = {});

// Chunk sizes of one streamed execution (0 = whole sequence for that phase),
// and where its K/V store lives (exec/placement.hpp decides).
struct StreamChunks {
  int64_t q_chunk = 0, kv_chunk = 0, mlp_chunk = 0, kv_block = 0, merge_tail_below = 0;
  // Query chunks attended per pass over the K/V (>= 1): with a host-staged
  // store, each pass moves the whole K/V over the bus once.
  int64_t q_group = 1;
  // Host-staged K/V only: the first query group attends each K/V chunk as
  // phase 1 makes it (streamed_block.cpp), when every K/V chunk starts on an
  // attention tile (kv_chunk a multiple of kAttnKvTile, or 0).
  bool kv_first_pass = false;
  // Host staging for the K/V store (both set) or none (resident on the device).
  Arena* kv_host = nullptr;
  StageQueue* kv_queue = nullptr;
  KvTier kv_store = KvTier::bf16;  // the K/V tier (ExecOptions::kv_store)
  // Query rows attended over a retained exact K/V beside an approximate
  // store (BlockKv::exact_rows); empty: none.
  std::vector<RowRange> exact_rows = {};
  // kvmix: the block's heads on 8 bits (exec/kvmix_heads.hpp resolves them).
  std::vector<int> kv_mix_heads = {};
  // Called as each phase (kv, attn, mlp) starts: a profiler's hook (h3s bench
  // --phase-times); empty: none.
  std::function<void(Phase)> on_phase = nullptr;
  static StreamChunks from(const ExecOptions& o) {
    return {.q_chunk = o.q_chunk,
            .kv_chunk = o.kv_chunk,
            .mlp_chunk = o.mlp_chunk,
            .kv_block = o.kv_block,
            .merge_tail_below = o.merge_tail_below,
            .kv_store = o.kv_store};
  }
};

void run_block_streamed(Backend& backend, Arena& arena, const BlockView& block, const Tensor& x,
                        const StreamChunks& chunks, BlockPhases phases = BlockPhases::all);
// The same over a residual that may live in host memory (exec/residual_rows.hpp).
class ResidualRows;
void run_block_streamed(Backend& backend, Arena& arena, const BlockView& block, ResidualRows& x,
                        const StreamChunks& chunks, BlockPhases phases = BlockPhases::all);

}  // namespace h3s
