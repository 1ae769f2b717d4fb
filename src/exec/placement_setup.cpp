// The placement set-up of a forward and of a block call (placement_setup.hpp).
#include "exec/placement_setup.hpp"

#include <algorithm>
#include <exception>

#include "core/error.hpp"
#include "exec/weight_feed.hpp"

namespace h3s {

size_t host_budget_of(const ExecOptions& o) {
  return o.host_budget != 0 ? size_t(o.host_budget) : available_host_memory() / 10 * 9;
}

PlacementSetup::PlacementSetup(Backend& be, const Placement& placement, size_t host_budget)
    : placement_(placement) {
  if (placement_.kv_on_host || placement_.x_on_host) {
    host_ = std::make_unique<Arena>(be.host_staging_memory(), host_budget);
    queue_ = be.make_stage_queue();
  }
}

PlacementSetup PlacementSetup::for_forward(Backend& be, const ModelWeights& w,
                                           const PackedLayout& layout, const ExecOptions& opt) {
  const ModelConfig& c = w.config;
  const ScratchModel scratch = scratch_model(be, w, opt.kv_store);
  const size_t host_budget = host_budget_of(opt);
  if (opt.vram_budget == 0)
    return {be,
            plan_placement(c, layout, opt, 0, host_budget, scratch, PlanScope::forward, be.rates()),
            host_budget};
  const WeightPlan all = plan_weights(be, w, 0);
  const size_t budget = size_t(opt.vram_budget);
  // A resident K/V store beside unprefetched weights first: an exposed
  // block upload costs less than moving the K/V over the bus each block.
  ExecOptions resident = opt;
  if (opt.kv_placement == KvPlacement::automatic) resident.kv_placement = KvPlacement::device;
  std::exception_ptr refused;
  for (const ExecOptions* o : {static_cast<const ExecOptions*>(&resident), &opt})
    for (const int slots : {2, 1}) {
      const size_t least = all.extras_bytes + size_t(slots) * all.block_bytes;
      if (budget <= least) continue;
      try {
        return {be,
                plan_placement(c, layout, *o, budget - least, host_budget, scratch,
                               PlanScope::forward, be.rates()),
                host_budget};
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::out_of_memory) throw;
        refused = std::current_exception();
      }
    }
  const Placement smallest = smallest_placement(c, layout, opt, scratch);
  const size_t need = all.extras_bytes + all.block_bytes + smallest.device_peak;
  // Room on the device, so the host budget refused it: say that.
  if (refused && need <= budget) std::rethrow_exception(refused);
  fail(ErrorKind::out_of_memory,
       "--vram-budget {} cannot hold this forward at {} tokens: the weights it must hold at "
       "once (non-block weights {} and one block {}) and its activations at their smallest "
       "placement ({}) need at least {}; raise the budget (or lower the chunk sizes)",
       format_bytes(budget), layout.seq_len, format_bytes(all.extras_bytes),
       format_bytes(all.block_bytes), smallest.describe(), format_bytes(need));
}

PlacementSetup PlacementSetup::for_block(Backend& be, const ModelConfig& config,
                                         const BlockWeights& block, const PackedLayout& shape,
                                         const ExecOptions& o) {
  size_t budget = size_t(o.vram_budget);
  if (budget == 0 && o.kv_placement == KvPlacement::automatic) {
    const size_t free_now = be.free_device_memory();
    const size_t margin = std::max(free_now / 10, size_t(512) << 20);
    budget = free_now > margin ? free_now - margin : (free_now ? 1 : 0);
  }
  const size_t host_budget = host_budget_of(o);
  return {be,
          plan_placement(config, shape, o, budget, host_budget,
                         scratch_model(be, block, o.kv_store), PlanScope::block, be.rates()),
          host_budget};
}

StreamChunks PlacementSetup::chunks(const ExecOptions& o) const {
  StreamChunks c = StreamChunks::from(o);
  c.kv_block = placement_.kv_block;
  c.q_group = placement_.q_group;
  c.kv_first_pass = placement_.kv_first_pass;
  if (placement_.kv_on_host) {
    c.kv_host = host_.get();
    c.kv_queue = queue_.get();
  }
  return c;
}

}  // namespace h3s
