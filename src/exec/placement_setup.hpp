// PlacementSetup: the one placement and staging set-up of a run, shared by
// the forward (exec/forward.cpp) and a single block call
// (runtime/block_engine.cpp): the budgets from the options, the plan
// (exec/placement.hpp) with the backend's scratch and rates, and, when the
// plan stages the K/V or x, an arena over the backend's host staging memory
// (within the host budget) and the queue its copies run on.
#pragma once

#include <cstddef>
#include <memory>

#include "backend/backend.hpp"
#include "exec/block.hpp"
#include "exec/placement.hpp"
#include "h3s/options.hpp"
#include "model/config.hpp"
#include "model/packed_layout.hpp"
#include "model/weights.hpp"

namespace h3s {

class PlacementSetup {
 public:
  // A forward of `model`: options.vram_budget (0: no limit) covers its
  // activations and its weights. The activations take the cheapest placement
  // that fits beside the smallest weight plan (the non-block weights and two
  // block slots for prefetch, else one; a resident K/V store first), the
  // weights get what it leaves (exec/weight_feed.hpp). Throws
  // Error(out_of_memory) naming both when nothing fits.
  static PlacementSetup for_forward(Backend& be, const ModelWeights& model,
                                    const PackedLayout& layout, const ExecOptions& options);
  // One block call's own memory on caller-held x, the RoPE table and
  // weights (`block`): within options.vram_budget, or (0, kv_placement auto)
  // within what the device has free now less a margin for the caller's
  // allocator, so the K/V go to host memory when they do not fit.
  static PlacementSetup for_block(Backend& be, const ModelConfig& config, const BlockWeights& block,
                                  const PackedLayout& shape, const ExecOptions& options);

  const Placement& placement() const { return placement_; }
  // Host staging: null unless the placement stages the K/V or x.
  Arena* host() const { return host_.get(); }
  StageQueue* queue() const { return queue_.get(); }
  // The streamed block's chunks: the options' sizes and tier with this
  // placement's decisions (kv_block, q_group, kv_first_pass) and its K/V
  // staging (the caller adds the exact rows and kvmix's heads).
  StreamChunks chunks(const ExecOptions& options) const;

 private:
  PlacementSetup(Backend& be, const Placement& placement, size_t host_budget);
  Placement placement_;
  std::unique_ptr<Arena> host_;
  std::unique_ptr<StageQueue> queue_;
};

// The host staging bytes a run may hold: options.host_budget, or (0) the
// memory the machine has available now less a tenth.
size_t host_budget_of(const ExecOptions& options);

}  // namespace h3s
