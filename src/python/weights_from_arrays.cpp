// load_weights_from_arrays: DLPack arrays -> runtime/memory_tensors -> the
// checkpoint loader.
#include "python/weights_from_arrays.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <memory>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "runtime/memory_tensors.hpp"

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

// The arrays as a SafetensorsFile over their memory (CPU and CUDA alike),
// after the checks only DLPack arrays need.
SafetensorsFile arrays_file(const std::vector<ArrayEntry>& arrays,
                            const std::map<std::string, std::string>& metadata, uintptr_t stream) {
  std::vector<MemoryTensor> tensors;
  tensors.reserve(arrays.size());
  for (const ArrayEntry& in : arrays) {
    const ReadArray& a = in.array;
    MemoryTensor t;
    TensorEntry& e = t.entry;
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
      e.device = Device::cuda;
      t.cuda_device = a.device_id();
    } else if (dev != nb::device::cpu::value) {
      fail(ErrorKind::bad_input, "{}: tensor '{}' lives on {}, expected cpu or cuda memory",
           kSource, in.name, device_label(dev, a.device_id()));
    }
    tensors.push_back(std::move(t));
  }
  return memory_tensors_file(std::move(tensors), metadata, kSource, stream);
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
  return load_model_from_memory(f, std::move(keep_alive), lazy_blocks);
}

BlockWeights load_block_from_arrays(const std::vector<ArrayEntry>& arrays,
                                    const std::map<std::string, std::string>& metadata,
                                    const ModelConfig& config, int64_t index,
                                    std::shared_ptr<const void> keep_alive, uintptr_t stream) {
  const SafetensorsFile f = arrays_file(arrays, metadata, stream);
  return load_dit_block(f, config, index, std::move(keep_alive));
}

}  // namespace h3s::py
