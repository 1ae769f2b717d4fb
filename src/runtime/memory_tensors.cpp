// memory_tensors_file / load_model_from_memory: tensors in memory through the
// checkpoint loader.
#include "runtime/memory_tensors.hpp"

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "runtime/engine_backend.hpp"

namespace h3s {

SafetensorsFile memory_tensors_file(std::vector<MemoryTensor> tensors,
                                    std::map<std::string, std::string> metadata,
                                    const std::string& source, uintptr_t stream) {
  std::vector<TensorEntry> entries;
  entries.reserve(tensors.size());
  std::map<std::string, int> cuda_device;  // entry name -> its GPU
  for (MemoryTensor& t : tensors) {
    if (t.entry.device == Device::cuda) {
      if (!cuda_built())
        fail(ErrorKind::bad_input,
             "{}: tensor '{}' is in CUDA memory but this h3stream was built without the CUDA "
             "backend: pass host tensors, or rebuild with nvcc on PATH",
             source, t.entry.name);
      cuda_device[t.entry.name] = t.cuda_device;
    }
    entries.push_back(std::move(t.entry));
  }
  // Read in the caller's stream order: a host framework may have just queued
  // the copy that fills the tensor (ComfyUI's offload stream, waited for there).
  DeviceReader read = [devices = std::move(cuda_device), stream](const TensorEntry& e, void* dst) {
    copy_cuda_to_host(devices.at(e.name), dst, e.data, e.bytes, stream);
  };
  return SafetensorsFile::from_entries(std::move(entries), std::move(metadata), source,
                                       std::move(read));
}

ModelWeights load_model_from_memory(const SafetensorsFile& f,
                                    std::shared_ptr<const void> keep_alive, bool lazy_blocks) {
  LoadOptions options;
  options.skip_dit_blocks = lazy_blocks;
  options.keep_alive = std::move(keep_alive);
  ModelWeights w = load_checkpoint(f, nullptr, options);
  if (!lazy_blocks) return w;
  // A lazy engine keeps the config only: no reference to the host's tensors,
  // which the host may move or free between calls.
  ModelWeights config_only;
  config_only.config = w.config;
  config_only.format = w.format;
  config_only.refiner.resize(w.refiner.size());
  config_only.blocks.resize(w.blocks.size());
  return config_only;
}

}  // namespace h3s
