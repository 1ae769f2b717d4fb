// The full H3 forward: patch embeds, text refiner, time embedding, every DiT
// block (stock or streamed), final layer, negated outputs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "exec/block.hpp"
#include "exec/placement.hpp"
#include "exec/weight_feed.hpp"
#include "h3s/forward.hpp"  // ProgressFn
#include "h3s/options.hpp"
#include "model/packed_layout.hpp"
#include "model/weights.hpp"

namespace h3s {

// Host inputs, already patchified / packed in segment order (model/latents.hpp).
struct ForwardInputs {
  std::vector<float> video_rows;  // [cond + video rows, 96] fp32, segment order
  std::vector<float> audio_rows;  // [audio rows, 32] fp32, channel-major
  std::vector<uint16_t> text;     // [text_len, text_dim] bf16 (Qwen states)
};

struct ForwardOutputs {
  std::vector<float> video;  // [video rows, 96] fp32 (negated velocity)
  std::vector<float> audio;  // [audio rows, 32] fp32 (negated)
  std::vector<LedgerEntry> ledger;
  size_t peak_bytes = 0;           // arena peak during the forward
  size_t weight_bytes = 0;         // the model's weights (source arrays)
  WeightPlan weights;              // the residency plan the forward ran
  size_t weights_peak_bytes = 0;   // most weight-store bytes held at once (measured)
  size_t activation_estimate = 0;  // the planner's predicted activation peak
  Placement placement;             // where the activations lived (exec/placement.hpp)
  StageTraffic staging;            // host-staging copies (zero when nothing was staged)
  double seconds = 0.0;
  int64_t stock_blocks = 0, streamed_blocks = 0;
  std::vector<std::string> log;  // e.g. the self-check line
  // kvmix: each DiT block's heads on 8 bits, by block index (empty otherwise).
  std::map<int, std::vector<int>> kv_mix_heads;
};

// Called before DiT block `block` runs, with its view (modulation, RoPE) and
// the residual x on the backend (its input); returning false ends the forward
// there: no later block and no final layer, so the outputs stay empty. A
// forward whose x is host-staged (placement) has no whole x to show: the tap
// is refused. h3s kvbench --checkpoint captures a block's q, k, v this way.
using BlockTap = std::function<bool(size_t block, const BlockView& view, const Tensor& x)>;

ForwardOutputs run_forward(Backend& backend, Arena& arena, const ModelWeights& weights,
                           const PackedLayout& layout, const ForwardInputs& inputs,
                           const ExecOptions& options, const ProgressFn& progress = {},
                           const BlockTap& tap = {});

// Random inputs of the right shapes for a layout (deterministic from seed).
ForwardInputs random_inputs(const ModelConfig& cfg, const PackedLayout& layout, uint64_t seed);

}  // namespace h3s
