// Weight residency of a forward: which weights a backend holds, and the feed
// that hands each block its prepared weights in forward order.
//
// Resident: every weight is prepared once (CUDA: uploaded; CPU: the source
// itself, a mapped file read in place). Streamed: the model's small weights
// (embeds, time embedder, final layer) stay resident and the blocks (refiner,
// then DiT) pass through one or two slot stores of one block each; with two,
// block i+1 is prepared on a worker thread while block i runs (prefetch 1).
#pragma once

#include <cstddef>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "model/weights.hpp"

namespace h3s {

struct WeightPlan {
  Residency residency = Residency::resident;
  int prefetch = 0;         // blocks prepared ahead of the one running (streamed: 0 or 1)
  size_t model_bytes = 0;   // every weight prepared at once
  size_t extras_bytes = 0;  // the non-block weights (resident either way)
  size_t block_bytes = 0;   // the largest block (refiner or DiT) prepared
  size_t held_bytes = 0;    // what the plan holds at once on the backend's device
  size_t budget = 0;        // bytes the weights may hold (0: no limit)
  std::string describe() const;
};

// Resident when the whole model fits in `budget` (0: always), else streamed
// with prefetch when two blocks fit beside the extras and without it when one
// does; a budget below that throws Error(out_of_memory) naming the minimum.
// Sizes are the backend's copy sizes (Residency::streamed), so a CPU plan
// makes the decisions a GPU plan makes.
WeightPlan plan_weights(const Backend& be, const ModelWeights& w, size_t budget);

// Prepares `src` for `be` into `store` (every array through Backend::prepare).
BlockWeights prepare_block(Backend& be, const BlockWeights& src, Residency r, WeightStore& store);
RefinerBlockWeights prepare_refiner_block(Backend& be, const RefinerBlockWeights& src, Residency r,
                                          WeightStore& store);
// The bytes prepare_block / prepare_refiner_block take in a store.
size_t prepared_block_bytes(const Backend& be, const BlockWeights& src, Residency r);
size_t prepared_refiner_bytes(const Backend& be, const RefinerBlockWeights& src, Residency r);

class WeightFeed {
 public:
  WeightFeed(Backend& be, const ModelWeights& src, const WeightPlan& plan);
  ~WeightFeed();
  WeightFeed(const WeightFeed&) = delete;
  WeightFeed& operator=(const WeightFeed&) = delete;

  // The prepared non-block weights (embeds, time embedder, refiner final norm,
  // final layer; config and host buffers as in the source). Its refiner and
  // blocks vectors are empty: take those from refiner() and block().
  const ModelWeights& model() const { return extras_; }
  // Refiner block i / DiT block i, prepared and ready for ops issued after
  // the call. Take them in forward order (refiners, then blocks), each
  // followed by its done_*() once the block's ops are issued.
  const RefinerBlockWeights& refiner(size_t i);
  void done_refiner(size_t i);
  const BlockWeights& block(size_t i);
  void done_block(size_t i);

  const WeightPlan& plan() const { return plan_; }
  // Highest bytes the feed's stores held at once.
  size_t peak_bytes() const;

 private:
  struct Slot {
    std::unique_ptr<WeightStore> store;
    RefinerBlockWeights refiner;
    BlockWeights block;
    int64_t unit = -1;  // the unit prepared into it
  };
  int64_t units() const;
  void prepare_unit(Slot& slot, int64_t unit);
  Slot& acquire(int64_t unit);
  void release(int64_t unit);

  Backend& be_;
  const ModelWeights& src_;
  WeightPlan plan_;
  ModelWeights extras_;
  std::unique_ptr<WeightStore> extras_store_;
  // Resident: every unit prepared into extras_store_.
  std::vector<RefinerBlockWeights> resident_refiner_;
  std::vector<BlockWeights> resident_blocks_;
  // Streamed: prefetch + 1 slots, unit u in slots_[u % slots_.size()].
  std::vector<Slot> slots_;
  std::future<void> pending_;
  int64_t pending_unit_ = -1;
};

}  // namespace h3s
