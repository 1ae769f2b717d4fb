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

// The arrays as a SafetensorsFile over their memory. CUDA arrays are copied
// to host (kept alive in `host_copies`) unless `skip_block_data` says their
// data is never read (lazy blocks: only names, dtypes and shapes matter).
SafetensorsFile arrays_file(const std::vector<ArrayEntry>& arrays,
                            const std::map<std::string, std::string>& metadata,
                            bool skip_block_data,
                            std::vector<std::unique_ptr<std::byte[]>>& host_copies) {
  std::vector<TensorEntry> entries;
  entries.reserve(arrays.size());
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
    const int dev = a.device_type();
    if (dev == nb::device::cpu::value || (skip_block_data && is_dit_block_data(in.name))) {
      e.data = static_cast<const std::byte*>(a.data());  // CUDA here: never dereferenced
    } else if (dev == nb::device::cuda::value) {
      auto copy = std::make_unique<std::byte[]>(e.bytes ? e.bytes : 1);
      copy_cuda_to_host(a.device_id(), copy.get(), a.data(), e.bytes);
      e.data = copy.get();
      host_copies.push_back(std::move(copy));
    } else {
      fail(ErrorKind::bad_input, "{}: tensor '{}' lives on {}, expected cpu or cuda memory",
           kSource, in.name, device_label(dev, a.device_id()));
    }
    entries.push_back(std::move(e));
  }
  return SafetensorsFile::from_entries(std::move(entries), metadata, kSource);
}

}  // namespace

ModelWeights load_weights_from_arrays(const std::vector<ArrayEntry>& arrays,
                                      const std::map<std::string, std::string>& metadata,
                                      bool lazy_blocks) {
  std::vector<std::unique_ptr<std::byte[]>> host_copies;  // alive for the load
  const SafetensorsFile f = arrays_file(arrays, metadata, lazy_blocks, host_copies);
  LoadOptions options;
  options.skip_dit_blocks = lazy_blocks;
  return load_checkpoint(f, nullptr, options);
}

BlockWeights load_block_from_arrays(const std::vector<ArrayEntry>& arrays,
                                    const std::map<std::string, std::string>& metadata,
                                    const ModelConfig& config, int64_t index) {
  std::vector<std::unique_ptr<std::byte[]>> host_copies;
  const SafetensorsFile f = arrays_file(arrays, metadata, false, host_copies);
  return load_dit_block(f, config, index);
}

}  // namespace h3s::py
