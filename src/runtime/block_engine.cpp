// BlockEngine: argument checks, the block's modulation from t_emb, and the
// stock / streamed executors on caller-owned memory.
#include "runtime/block_engine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.hpp"
#include "exec/block.hpp"
#include "exec/block_context.hpp"
#include "exec/exact_rows.hpp"
#include "exec/placement.hpp"
#include "exec/placement_setup.hpp"
#include "exec/time_embed.hpp"
#include "exec/weight_feed.hpp"

namespace h3s {

namespace {

std::string shape_of(const Tensor& t) {
  std::vector<int64_t> s(t.shape.begin(), t.shape.begin() + t.rank);
  return fmt::format("[{}]", fmt::join(s, ", "));
}

std::string_view device_name(Device d) {
  return d == Device::cuda ? "cuda" : "cpu";
}

// One tensor argument: dtype, device, exact shape, contiguity.
void expect_tensor(const Tensor& t, const char* arg, std::initializer_list<DType> dtypes,
                   Device device, std::initializer_list<int64_t> shape) {
  bool dtype_ok = false;
  std::string expected;
  for (DType d : dtypes) {
    dtype_ok |= t.dtype == d;
    expected += (expected.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  if (!dtype_ok)
    fail(ErrorKind::invalid_argument, "{}: dtype {} is not accepted, expected {}", arg,
         dtype_name(t.dtype), expected);
  if (t.device != device)
    fail(ErrorKind::invalid_argument,
         "{}: is on {} but this engine runs on {}: move it there (or build the engine with "
         "backend='{}')",
         arg, device_name(t.device), device_name(device), device_name(t.device));
  const std::vector<int64_t> want(shape);
  const std::vector<int64_t> got(t.shape.begin(), t.shape.begin() + t.rank);
  if (got != want)
    fail(ErrorKind::invalid_argument, "{}: shape {} is not the expected [{}]", arg, shape_of(t),
         fmt::join(want, ", "));
  if (!t.is_contiguous())
    fail(ErrorKind::invalid_argument, "{}: must be contiguous (call .contiguous() first)", arg);
}

}  // namespace

BlockEngine::BlockEngine(ModelWeights weights, const std::string& backend, int device,
                         size_t budget_bytes, int threads, size_t vram_budget)
    : weights_(std::move(weights)), backend_(backend, device, budget_bytes, threads) {
  resident_.resize(weights_.blocks.size());
  // Blocks only (the engine runs single blocks): resident when they all fit.
  if (vram_budget != 0) {
    size_t all = 0;
    for (const BlockWeights& b : weights_.blocks)
      all += prepared_block_bytes(backend_.ops(), b, Residency::streamed);
    resident_weights_ = all <= vram_budget;
  }
}

void BlockEngine::check_call(const TensorBlockCall& c) const {
  const ModelConfig& cfg = config();
  if (c.index < 0 || c.index >= cfg.blocks)
    fail(ErrorKind::invalid_argument, "index: block {} does not exist, the model has blocks 0..{}",
         c.index, cfg.blocks - 1);
  if (!c.weights && weights_.blocks[size_t(c.index)].attn.qkv.out == 0)
    fail(ErrorKind::invalid_argument,
         "index: block {}'s weights are not loaded (a lazy engine): pass weights= with the "
         "call, or call load_block({}, tensors) first",
         c.index, c.index);
  const Device dev = device_kind();
  if (c.x.rank != 2)
    fail(ErrorKind::invalid_argument, "x: shape {} is not [tokens, hidden = {}]", shape_of(c.x),
         cfg.hidden);
  const int64_t seq = c.x.shape[0];
  if (seq < 1) fail(ErrorKind::invalid_argument, "x: has no rows (shape {})", shape_of(c.x));
  expect_tensor(c.x, "x", {DType::bf16}, dev, {seq, cfg.hidden});
  if (c.t_emb.rank != 2 || c.t_emb.shape[0] < 1)
    fail(ErrorKind::invalid_argument, "t_emb: shape {} is not [timesteps >= 1, time_dim = {}]",
         shape_of(c.t_emb), cfg.time_dim);
  const int64_t timesteps = c.t_emb.shape[0];
  // The full form hands the block bf16(t_emb); the curve form its fp32 lerp.
  const DType t_dtype = cfg.time_form == TimeForm::curve ? DType::f32 : DType::bf16;
  expect_tensor(c.t_emb, "t_emb", {t_dtype}, dev, {timesteps, cfg.time_dim});
  expect_tensor(c.rope, "rope", {DType::bf16}, dev, {seq, cfg.rope_dim / 2, 2});
  const int64_t mod_rows = timesteps * ModelConfig::kModalities;
  if (c.runs.empty())
    fail(ErrorKind::invalid_argument,
         "mod_runs: empty, expected (begin, end, mod_row) runs "
         "covering rows [0, {})",
         seq);
  int64_t next = 0;
  for (size_t i = 0; i < c.runs.size(); ++i) {
    const ModRun& r = c.runs[i];
    if (r.begin != next || r.end <= r.begin || r.end > seq)
      fail(ErrorKind::invalid_argument,
           "mod_runs[{}] = ({}, {}, {}): runs must cover rows [0, {}) in order without gaps or "
           "empty runs; this one should start at {}",
           i, r.begin, r.end, r.mod_row, seq, next);
    if (r.mod_row < 0 || r.mod_row >= mod_rows)
      fail(ErrorKind::invalid_argument,
           "mod_runs[{}] = ({}, {}, {}): mod_row must be in 0..{} (3 rows per t_emb row)", i,
           r.begin, r.end, r.mod_row, mod_rows - 1);
    next = r.end;
  }
  if (next != seq)
    fail(ErrorKind::invalid_argument, "mod_runs: cover rows [0, {}) but x has {} rows", next, seq);
  c.options.validate();
}

const BlockWeights& BlockEngine::prepared(const TensorBlockCall& c) {
  Backend& be = backend_.ops();
  auto fill = [&](Prepared& p, const BlockWeights& src, Residency r) {
    if (&p == &per_call_) {
      // One slab, grown when a call needs more and reused otherwise: no
      // allocation or free (and no cudaFree's device-wide wait) per call.
      const size_t need = prepared_block_bytes(be, src, r);
      if (p.store && p.store->capacity() < need) {
        be.synchronize();  // its last call's kernels may still read it
        p.store.reset();
      }
      if (!p.store) p.store = be.make_weight_store("per-call weights", std::max<size_t>(need, 1));
    } else if (!p.store) {
      p.store = be.make_weight_store(fmt::format("block {} weights", c.index), 0);
    }
    p.store->reset();
    p.block = prepare_block(be, src, r, *p.store);
    p.generation = src.attn.qkv.generation;
    p.store->seal();
  };
  Prepared* p = &per_call_;
  if (c.weights) {
    // The caller's arrays for this call only: used in place where they already
    // are in the kernels' form on this device (zero copy), uploaded otherwise.
    // The attention half never reads the MLP's weights: leave them where they are.
    BlockWeights src = *c.weights;
    if (c.phases == BlockPhases::attn_only) src.mlp = MlpWeights{};
    fill(per_call_, src, Residency::borrowed);
  } else if (resident_weights_) {
    const BlockWeights& src = weights_.blocks[size_t(c.index)];
    p = &resident_[size_t(c.index)];
    if (!p->store || p->generation != src.attn.qkv.generation) fill(*p, src, Residency::resident);
  } else {
    fill(per_call_, weights_.blocks[size_t(c.index)], Residency::streamed);
  }
  weight_peak_ = std::max(weight_peak_, weight_bytes_unlocked());
  be.wait_ready(*p->store);
  return p->block;
}

template <class Run>
void BlockEngine::with_block(const TensorBlockCall& c, Run&& run) {
  const std::lock_guard<std::mutex> lock(mutex_);
  check_call(c);
  const ModelConfig& cfg = config();
  const EngineBackend::CallScope scope(backend_, c.stream);
  Backend& be = backend_.ops();
  Arena& arena = backend_.arena();
  const BlockWeights& w = prepared(c);
  const int block = int(c.index);

  // AdalnProj: the full form applies SiLU (in bf16) before the bf16 linear;
  // the curve form feeds its fp32 lerp straight into the fp32 linear.
  arena.mark(block, Phase::setup);
  OwnedTensor mods;
  if (cfg.time_form == TimeForm::full) {
    OwnedTensor act =
        arena.tensor(DType::bf16, {c.t_emb.rows(), cfg.time_dim}, "adaln input SiLU(t_emb)");
    be.silu(c.t_emb, act.view);
    mods = adaln_project(be, arena, w.adaln, act.view, "block modulation");
  } else {
    mods = adaln_project(be, arena, w.adaln, c.t_emb, "block modulation");
  }
  PackedLayout layout;  // only the mod runs matter to a block
  layout.seq_len = c.x.rows();
  layout.mod_runs = c.runs;
  BlockContext ctx;
  ctx.config = &cfg;
  ctx.layout = &layout;
  ctx.rope = c.rope;
  ctx.mods = split_block_mods(mods.view, cfg.hidden);
  ctx.block_index = block;
  run(be, arena, BlockView::dit(w, ctx));
  mods.reset();
  // The next call may refill the per-call store once these ops have run; the
  // caller's arrays are not referenced past its call.
  if (per_call_.store) be.release(*per_call_.store);
  if (c.weights) per_call_.block = BlockWeights{};
}

namespace {

bool loaded(const BlockWeights& w) {
  return w.attn.qkv.out > 0;  // an empty BlockWeights has 0 x 0 layers
}

}  // namespace

void BlockEngine::load_block(int64_t index, BlockWeights weights) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (index < 0 || index >= config().blocks)
    fail(ErrorKind::invalid_argument, "block index {} is out of range: the model has {} blocks",
         index, config().blocks);
  // The prepared copy of the old block goes with it; a new load has a new
  // generation, so it could never be served anyway.
  resident_[size_t(index)] = Prepared{};  // its memory is freed once kernels using it ran
  weights_.blocks[size_t(index)] = std::move(weights);
}

void BlockEngine::drop_block(int64_t index) {
  load_block(index, BlockWeights{});
}

bool BlockEngine::block_loaded(int64_t index) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return index >= 0 && index < config().blocks && loaded(weights_.blocks[size_t(index)]);
}

void BlockEngine::set_resident_weights(bool resident) {
  const std::lock_guard<std::mutex> lock(mutex_);
  resident_weights_ = resident;
  if (!resident)
    for (Prepared& p : resident_) p = Prepared{};
}

size_t BlockEngine::weight_bytes_unlocked() const {
  size_t n = per_call_.store ? per_call_.store->bytes() : 0;
  for (const Prepared& p : resident_)
    if (p.store) n += p.store->bytes();
  return n;
}

size_t BlockEngine::weight_bytes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return weight_bytes_unlocked();
}

size_t BlockEngine::weight_peak_bytes() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return weight_peak_;
}

bool BlockEngine::resident_weights() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return resident_weights_;
}

ExecMode BlockEngine::ran_mode(const TensorBlockCall& c) {
  // The forward's rule (exec/forward.cpp): short sequences gain nothing from
  // streaming, so below min_tokens a block runs stock (the same bits).
  return c.mode == ExecMode::streamed && c.x.rows() >= c.options.min_tokens ? ExecMode::streamed
                                                                            : ExecMode::stock;
}

ExecMode BlockEngine::run_block(const TensorBlockCall& c) {
  const ExecMode mode = ran_mode(c);
  with_block(c, [&](Backend& be, Arena& arena, const BlockView& view) {
    be.use_kernels(c.options.attn_kernel, c.options.gemm_kernel);
    // exact_av_rows: the text and audio rows, from the call's mod runs.
    const std::vector<RowRange> exact = exact_query_rows(c.options, c.runs);
    // kvmix: the block's heads on 8 bits, calibrated on its first call.
    const std::vector<int> mix = kv_mix_.for_block(be, arena, view, c.x, c.options);
    if (mode == ExecMode::stock) {
      run_block_stock(be, arena, view, c.x, c.phases, BlockKv{c.options.kv_store, exact, mix});
      last_placement_ = PlacementReport{};
      last_placement_.line = "stock";
      return;
    }
    // The call's own memory (the K/V store and the chunk buffers; x, the
    // RoPE table and the weights are the caller's) and its host staging
    // (exec/placement_setup.hpp).
    const ExecOptions& o = c.options;
    PackedLayout shape;  // the block's view of the sequence: its length, its t_emb rows
    shape.seq_len = c.x.rows();
    shape.timesteps.assign(size_t(c.t_emb.rows()), 0.0f);
    ExecOptions plan = o;
    plan.min_tokens = 0;  // ran_mode decided: this call streams
    const PlacementSetup setup = PlacementSetup::for_block(
        be, config(), c.weights ? *c.weights : weights_.blocks[size_t(c.index)], shape, plan);
    const Placement& place = setup.placement();
    StreamChunks chunks = setup.chunks(o);
    chunks.exact_rows = exact;
    chunks.kv_mix_heads = mix;
    run_block_streamed(be, arena, view, c.x, chunks, c.phases);
    PlacementReport r;
    r.line = place.describe();
    r.kv_on_host = place.kv_on_host;
    // The arena holds the block's modulation beside its own buffers.
    r.predicted_kv = place.kv_peak - place.caller_held;
    r.predicted_attn = place.attn_peak - place.caller_held;
    r.predicted_mlp = place.mlp_peak - place.caller_held;
    if (StageQueue* queue = setup.queue()) {
      r.staging = queue->traffic();
      r.line += fmt::format("; staged {} out, {} back", format_bytes(r.staging.to_host_bytes),
                            format_bytes(r.staging.to_device_bytes));
    }
    last_placement_ = std::move(r);
  });
  return mode;
}

BlockEngine::PlacementReport BlockEngine::last_placement() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return last_placement_;
}

SelfCheckResult BlockEngine::self_check(const TensorBlockCall& c) {
  SelfCheckResult r;
  with_block(c, [&](Backend& be, Arena& arena, const BlockView& view) {
    be.use_kernels(c.options.attn_kernel, c.options.gemm_kernel);
    r = self_check_block(be, arena, view, c.x, c.options, exact_query_rows(c.options, c.runs),
                         kv_mix_.for_block(be, arena, view, c.x, c.options));
  });
  return r;
}

LatentOutputs BlockEngine::forward(const LatentInputs& inputs, const ExecOptions& options,
                                   const ProgressFn& progress, uintptr_t stream) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < weights_.blocks.size(); ++i)
    if (!loaded(weights_.blocks[i]))
      fail(ErrorKind::invalid_argument,
           "forward: block {} has no weights (an engine made with lazy_blocks holds the config "
           "only): make the engine from the whole checkpoint or state dict",
           i);
  const EngineBackend::CallScope scope(backend_, stream);
  return run_latent_forward(backend_.ops(), backend_.arena(), weights_, inputs, options, progress);
}

std::vector<LedgerEntry> BlockEngine::ledger() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return backend_.arena().ledger();
}

void BlockEngine::reset_ledger() {
  const std::lock_guard<std::mutex> lock(mutex_);
  backend_.arena().clear_ledger();
  backend_.arena().reset_peak();
}

size_t BlockEngine::arena_peak() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return backend_.arena().peak();
}

size_t BlockEngine::arena_allocated() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return backend_.arena().allocated();
}

}  // namespace h3s
