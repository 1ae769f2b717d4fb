// BlockEngine: one model on one backend, under the public h3s::Engine
// (src/api) and the Python module. It holds the model's weights as views (a
// mapped checkpoint, or the caller's own arrays: no copy of the model), one
// backend with its activation arena and weight stores, and runs single DiT
// blocks on caller-owned tensors exactly as ComfyUI's DiTBlock.forward(x,
// t_emb, mod_segments, rope_freqs) does, stock or streamed, or the whole
// forward on real inputs. No Python or API types here: the binding
// (src/python/py_engine.cpp) and src/api turn arrays into Tensor views.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exec/block.hpp"
#include "exec/kvmix_heads.hpp"
#include "exec/latent_forward.hpp"
#include "exec/self_check.hpp"
#include "h3s/options.hpp"
#include "model/weights.hpp"
#include "runtime/engine_backend.hpp"

namespace h3s {

// One block call over engine tensor views (the public h3s::BlockCall and the
// Python binding fill it). x is updated in place; nothing is copied in or out.
struct TensorBlockCall {
  int64_t index = 0;         // DiT block, 0 .. blocks-1
  Tensor x;                  // bf16 [S, hidden], contiguous, on the engine's device
  Tensor t_emb;              // [M, time_dim]: bf16 (full form) or f32 (curve form)
  std::vector<ModRun> runs;  // ComfyUI's mod_segments: cover [0, S) in order, rows < 3 M
  Tensor rope;               // bf16 [S, rope_dim / 2, 2] (cos, sin)
  ExecMode mode = ExecMode::streamed;
  ExecOptions options;
  uintptr_t stream = 0;                   // cudaStream_t of the caller (0: legacy default stream)
  BlockPhases phases = BlockPhases::all;  // attn_only: the attention half
  // This call's weights (the caller's arrays, borrowed: used in place on the
  // engine's device, uploaded for this call otherwise); none: the engine's own.
  std::optional<BlockWeights> weights;
};

class BlockEngine {
 public:
  // vram_budget: device bytes for the blocks' weights (0: no limit); blocks stay
  // resident after their first call when the model fits, otherwise they are
  // prepared per call (exec/weight_feed.hpp's plan).
  BlockEngine(ModelWeights weights, const std::string& backend, int device, size_t budget_bytes,
              int threads, size_t vram_budget = 0);

  const ModelWeights& weights() const { return weights_; }
  // kvmix: the heads on 8 bits each block's first call calibrated, by index.
  std::map<int, std::vector<int>> kv_mix_heads() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return kv_mix_.kept();
  }
  const ModelConfig& config() const { return weights_.config; }
  const std::string& backend_name() const { return backend_.name(); }
  Device device_kind() const { return backend_.device_kind(); }
  int device() const { return backend_.device(); }

  // Validates every argument (Error(invalid_argument) naming it, expected vs
  // found), computes the block's modulation from t_emb (SiLU + adaLN linear
  // like AdalnProj), then runs the block in place on call.x. Returns the mode
  // that ran: streamed only when asked for and the sequence has at least
  // options.min_tokens rows (ran_mode), as the forward decides per block.
  ExecMode run_block(const TensorBlockCall& call);
  // What run_block runs for this call: ExecMode::stock when call.mode is
  // stock or x has fewer than call.options.min_tokens rows (exec/forward.cpp).
  static ExecMode ran_mode(const TensorBlockCall& call);
  // Where the last run_block's activations lived: the planner's line ("stock"
  // for a stock call), the K/V placement, the predicted own peak of each
  // phase (the arena's ledger has the measured ones) and the bytes staged.
  struct PlacementReport {
    std::string line;
    bool kv_on_host = false;
    size_t predicted_kv = 0, predicted_attn = 0, predicted_mlp = 0;
    StageTraffic staging;
  };
  PlacementReport last_placement() const;
  // self_check (docs/FEATURES.md "Controls") on this block and input: stock vs streamed
  // variants side by side on copies; call.x is not modified.
  SelfCheckResult self_check(const TensorBlockCall& call);

  // The whole model on real inputs (exec/latent_forward.hpp), on this
  // engine's backend: stream = the caller's CUDA stream. The forward plans its
  // own weights (options.vram_budget), beside any blocks run_block keeps
  // prepared. A lazy engine cannot: it holds no block weights.
  LatentOutputs forward(const LatentInputs& inputs, const ExecOptions& options,
                        const ProgressFn& progress = {}, uintptr_t stream = 0);

  std::vector<LedgerEntry> ledger() const;
  void reset_ledger();  // clears the ledger and restarts the peak
  size_t arena_peak() const;
  size_t arena_allocated() const;

  // false: a block's prepared weights go after each call (re-prepared from the
  // engine's source on the next one), so the engine adds at most one block of
  // weights to the VRAM of a host that keeps its own copy; true: every block
  // stays prepared after its first call (the default when the model fits the
  // engine's vram_budget).
  void set_resident_weights(bool resident);
  bool resident_weights() const;
  // Device bytes held by prepared weights now, and at most so far.
  size_t weight_bytes() const;
  size_t weight_peak_bytes() const;

  // Lazy engines (built from the config only) take a block's weights per call
  // or through load_block, which replaces block `index` (a new generation: a
  // prepared copy of the old one is never used again); drop_block forgets it.
  void load_block(int64_t index, BlockWeights weights);
  void drop_block(int64_t index);
  bool block_loaded(int64_t index) const;

 private:
  void check_call(const TensorBlockCall& call) const;
  size_t weight_bytes_unlocked() const;
  // The block's weights prepared for the backend (and ready), from the call's
  // own or the engine's source.
  const BlockWeights& prepared(const TensorBlockCall& call);
  template <class Run>
  void with_block(const TensorBlockCall& call, Run&& run);

  ModelWeights weights_;  // the source: views of a mapped file or the caller's arrays
  EngineBackend backend_;
  bool resident_weights_ = true;
  // Resident: block i prepared into its own store, tagged with the source's
  // generation. Per call: one store reused by every call.
  struct Prepared {
    std::unique_ptr<WeightStore> store;
    BlockWeights block;
    uint64_t generation = 0;
  };
  std::vector<Prepared> resident_;
  Prepared per_call_;
  size_t weight_peak_ = 0;
  PlacementReport last_placement_;
  KvMixHeads kv_mix_;         // kvmix: each block's heads on 8 bits, kept from its first call
  mutable std::mutex mutex_;  // one call at a time: the backend and arena are not thread-safe
};

}  // namespace h3s
