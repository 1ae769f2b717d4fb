// h3s::Engine (include/h3s/engine.hpp) over the runtime's BlockEngine.
#include "h3s/engine.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "runtime/block_engine.hpp"
#include "runtime/memory_tensors.hpp"

namespace h3s {

namespace {

// A public array as an engine tensor view (rank 1..4, contiguous by definition).
Tensor tensor_of(const ArrayRef& a, const char* arg) {
  if (a.shape.empty() || a.shape.size() > 4)
    fail(ErrorKind::invalid_argument, "{}: shape [{}] must have rank 1 to 4", arg,
         fmt::join(a.shape, ", "));
  if (a.data == nullptr) fail(ErrorKind::invalid_argument, "{}: has no data (a null pointer)", arg);
  Tensor t;
  t.data = const_cast<void*>(a.data);  // written only where a call says so (x)
  t.dtype = a.dtype;
  t.device = a.device;
  t.rank = int(a.shape.size());
  int64_t step = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.shape[size_t(d)] = a.shape[size_t(d)];
    t.stride[size_t(d)] = step;
    step *= a.shape[size_t(d)];
  }
  return t;
}

// A CUDA array must sit on the engine's GPU, not only on a GPU: kernels
// launched on the engine's device cannot read another device's pointers.
void check_device(const ArrayRef& a, const char* arg, const BlockEngine& e) {
  if (e.device_kind() == Device::cuda && a.device == Device::cuda && a.device_index != e.device())
    fail(ErrorKind::invalid_argument,
         "{}: the array is on cuda:{} but the engine runs on cuda:{}: move it there or make the "
         "engine for that device",
         arg, a.device_index, e.device());
}

}  // namespace

struct Engine::Impl {
  BlockEngine engine;
  Impl(ModelWeights w, const EngineSetup& s)
      : engine(std::move(w), s.backend, s.device, size_t(s.arena_budget), s.threads,
               size_t(s.block_vram_budget)) {}
};

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

Engine Engine::from_checkpoint(const std::string& path, const EngineSetup& setup) {
  return Engine(std::make_unique<Impl>(load_checkpoint(path), setup));
}

Engine Engine::from_arrays(std::vector<NamedArray> arrays,
                           std::map<std::string, std::string> metadata,
                           std::shared_ptr<const void> keep_alive, const EngineSetup& setup) {
  if (!keep_alive)
    fail(ErrorKind::invalid_argument,
         "from_arrays: keep_alive is empty: pass a shared_ptr that owns (or pins) the arrays' "
         "memory for the engine's lifetime");
  std::vector<MemoryTensor> tensors;
  tensors.reserve(arrays.size());
  for (NamedArray& n : arrays) {
    MemoryTensor t;
    TensorEntry& e = t.entry;
    e.name = std::move(n.name);
    e.dtype = n.safetensors_dtype.empty() ? std::string(safetensors_dtype_name(n.array.dtype))
                                          : n.safetensors_dtype;
    const std::optional<size_t> size = safetensors_dtype_size(e.dtype);
    if (!size)
      fail(ErrorKind::invalid_argument, "arrays: tensor '{}' has unknown dtype name '{}'", e.name,
           e.dtype);
    if (*size != dtype_size(n.array.dtype))
      fail(ErrorKind::invalid_argument,
           "arrays: tensor '{}' is named {} ({} bytes per element) but its array is {} ({} bytes)",
           e.name, e.dtype, *size, dtype_name(n.array.dtype), dtype_size(n.array.dtype));
    for (int64_t d : n.array.shape)
      if (d < 0)
        fail(ErrorKind::invalid_argument, "arrays: tensor '{}' has a negative size in [{}]", e.name,
             fmt::join(n.array.shape, ", "));
    e.elem_size = *size;
    e.shape = n.array.shape;
    e.bytes = n.array.bytes();
    e.data = static_cast<const std::byte*>(n.array.data);
    if (e.data == nullptr && e.bytes > 0)
      fail(ErrorKind::invalid_argument, "arrays: tensor '{}' has no data (a null pointer)", e.name);
    e.device = n.array.device;
    t.cuda_device = n.array.device_index;
    tensors.push_back(std::move(t));
  }
  const SafetensorsFile f = memory_tensors_file(std::move(tensors), std::move(metadata), "arrays");
  return Engine(
      std::make_unique<Impl>(load_model_from_memory(f, std::move(keep_alive), false), setup));
}

ModelInfo Engine::info() const {
  const BlockEngine& e = impl_->engine;
  const ModelConfig& c = e.config();
  ModelInfo i;
  i.format = std::string(format_name(e.weights().format));
  i.time_form = c.time_form == TimeForm::full ? "full" : "curve";
  i.hidden = c.hidden;
  i.blocks = c.blocks;
  i.refiner_blocks = c.refiner_blocks;
  i.heads = c.heads;
  i.head_dim = c.head_dim;
  i.ffn = c.ffn;
  i.text_dim = c.text_dim;
  i.video_latent = c.video_latent;
  i.audio_latent = c.audio_latent;
  i.time_dim = c.time_dim;
  i.rope_dim = c.rope_dim;
  i.weight_bytes = e.weights().bytes();
  return i;
}

const std::string& Engine::backend() const {
  return impl_->engine.backend_name();
}

LatentOutputs Engine::forward(const LatentInputs& inputs, const Options& options,
                              const ProgressFn& progress) {
  const BlockEngine& e = impl_->engine;
  check_device(inputs.video_latent, "video_latent", e);
  check_device(inputs.audio_latent, "audio_latent", e);
  check_device(inputs.context, "context", e);
  if (inputs.cond_latent) check_device(*inputs.cond_latent, "cond_latent", e);
  return impl_->engine.forward(inputs, options, progress);
}

ExecMode Engine::run_block(const BlockCall& call) {
  TensorBlockCall c;
  c.index = call.index;
  check_device(call.x, "x", impl_->engine);
  check_device(call.t_emb, "t_emb", impl_->engine);
  check_device(call.rope, "rope", impl_->engine);
  c.x = tensor_of(call.x, "x");
  c.t_emb = tensor_of(call.t_emb, "t_emb");
  c.rope = tensor_of(call.rope, "rope");
  c.runs.reserve(call.segments.size());
  for (const ModSegment& s : call.segments) c.runs.push_back({s.begin, s.end, s.mod_row});
  c.mode = call.mode;
  c.options = call.options;
  c.stream = call.cuda_stream;
  return impl_->engine.run_block(c);
}

std::string version() {
  return H3S_VERSION;
}

}  // namespace h3s
