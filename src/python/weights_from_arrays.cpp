// load_weights_from_arrays: arrays -> SafetensorsFile::from_entries -> the
// checkpoint loader.
#include "python/weights_from_arrays.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <memory>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "python/engine_backend.hpp"

namespace h3s::py {

namespace {

constexpr const char* kSource = "tensors";  // stands in for a file path in messages

bool c_contiguous(const ReadArray& a) {
  int64_t step = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != step) return false;
    step *= int64_t(a.shape(d));
  }
  return true;
}

// The arrays as a SafetensorsFile over their memory (CPU and CUDA alike);
// a CUDA entry's bytes are read only through the DeviceReader.
SafetensorsFile arrays_file(const std::vector<ArrayEntry>& arrays,
                            const std::map<std::string, std::string>& metadata, uintptr_t stream) {
  std::vector<TensorEntry> entries;
  entries.reserve(arrays.size());
  std::map<std::string, int> cuda_device;  // entry name -> its GPU
  for (const ArrayEntry& in : arrays) {
    const ReadArray& a = in.array;
    TensorEntry e;
    e.name = in.name;
    const std::optional<std::string> natural = safetensors_dtype(a.dtype());
    if (!in.dtype.empty()) {
      // An explicit name reinterprets the bytes (float8 handed over as uint8).
      const std::optional<size_t> size = safetensors_dtype_size(in.dtype);
      if (!size)
        fail(ErrorKind::bad_input, "{}: tensor '{}' has unknown dtype name '{}'", kSource, in.name,
             in.dtype);
      if (*size != a.itemsize())
        fail(ErrorKind::bad_input,
             "{}: tensor '{}' is named {} ({} bytes per element) but its array is {} ({} bytes)",
             kSource, in.name, in.dtype, *size, dtype_label(a.dtype()), a.itemsize());
      e.dtype = in.dtype;
    } else if (natural) {
      e.dtype = *natural;
    } else {
      fail(ErrorKind::bad_input, "{}: tensor '{}' has dtype {}, which no checkpoint holds", kSource,
           in.name, dtype_label(a.dtype()));
    }
    for (size_t d = 0; d < a.ndim(); ++d) e.shape.push_back(int64_t(a.shape(d)));
    e.bytes = a.nbytes();
    if (!c_contiguous(a))
      fail(ErrorKind::bad_input, "{}: tensor '{}' is not contiguous: pass .contiguous() arrays",
           kSource, in.name);
    e.data = static_cast<const std::byte*>(a.data());
    const int dev = a.device_type();
    if (dev == nb::device::cuda::value) {
      if (!cuda_built())
        fail(ErrorKind::bad_input,
             "{}: tensor '{}' is a CUDA tensor but this h3stream was built without the CUDA "
             "backend: pass CPU tensors, or rebuild with nvcc on PATH",
             kSource, in.name);
      e.device = Device::cuda;
      cuda_device[in.name] = a.device_id();
    } else if (dev != nb::device::cpu::value) {
      fail(ErrorKind::bad_input, "{}: tensor '{}' lives on {}, expected cpu or cuda memory",
           kSource, in.name, device_label(dev, a.device_id()));
    }
    entries.push_back(std::move(e));
  }
  // Read in the caller's stream order: a host framework may have just queued
  // the copy that fills the array (ComfyUI's offload stream, waited for there).
  DeviceReader read = [devices = std::move(cuda_device), stream](const TensorEntry& e, void* dst) {
    copy_cuda_to_host(devices.at(e.name), dst, e.data, e.bytes, stream);
  };
  return SafetensorsFile::from_entries(std::move(entries), metadata, kSource, std::move(read));
}

}  // namespace

std::shared_ptr<const void> keep_arrays_alive(std::vector<ArrayEntry> arrays) {
  // The last reference may go on any thread, with or without the GIL.
  return std::shared_ptr<const void>(new std::vector<ArrayEntry>(std::move(arrays)),
                                     [](const void* p) {
                                       const nb::gil_scoped_acquire gil;
                                       delete static_cast<const std::vector<ArrayEntry>*>(p);
                                     });
}

ModelWeights load_weights_from_arrays(const std::vector<ArrayEntry>& arrays,
                                      const std::map<std::string, std::string>& metadata,
                                      std::shared_ptr<const void> keep_alive, bool lazy_blocks,
                                      uintptr_t stream) {
  const SafetensorsFile f = arrays_file(arrays, metadata, stream);
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

BlockWeights load_block_from_arrays(const std::vector<ArrayEntry>& arrays,
                                    const std::map<std::string, std::string>& metadata,
                                    const ModelConfig& config, int64_t index,
                                    std::shared_ptr<const void> keep_alive, uintptr_t stream) {
  const SafetensorsFile f = arrays_file(arrays, metadata, stream);
  return load_dit_block(f, config, index, std::move(keep_alive));
}

}  // namespace h3s::py
