// load_arrays / save_arrays (include/h3s/arrays_io.hpp) over model/safetensors.
#include "h3s/arrays_io.hpp"

#include <cstring>

#include "core/error.hpp"
#include "model/safetensors.hpp"

namespace h3s {

namespace {}  // namespace

std::map<std::string, Array> load_arrays(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  std::map<std::string, Array> out;
  for (const std::string& name : f.names()) {
    const TensorEntry& e = f.entry(name);
    const std::optional<DType> t = to_engine_dtype(e.dtype);
    if (!t)
      fail(ErrorKind::bad_input, "{}: tensor '{}' has dtype {}, which h3stream has no type for",
           path, name, e.dtype);
    Array a(*t, e.shape);
    H3S_CHECK(a.bytes.size() == e.bytes);
    if (e.bytes) std::memcpy(a.bytes.data(), e.data, e.bytes);
    out.emplace(name, std::move(a));
  }
  return out;
}

void save_arrays(const std::string& path, const std::map<std::string, Array>& arrays,
                 const std::map<std::string, std::string>& metadata) {
  std::vector<WriteEntry> entries;
  for (const auto& [name, a] : arrays) {
    if (a.bytes.size() != size_t(a.numel()) * dtype_size(a.dtype))
      fail(ErrorKind::invalid_argument,
           "save_arrays: array '{}' holds {} bytes, its shape needs {}", name, a.bytes.size(),
           size_t(a.numel()) * dtype_size(a.dtype));
    entries.push_back({name, std::string(safetensors_dtype_name(a.dtype)), a.shape, a.bytes});
  }
  write_safetensors(path, entries, metadata);
}

}  // namespace h3s
