// The safetensors reader: SafetensorsFile's mapping, its entries and its
// views (the header's parse is safetensors_parse.cpp, the writer
// safetensors_write.cpp).
#include "model/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.hpp"
#include "model/safetensors_format.hpp"

namespace h3s {

using namespace safetensors_format;

// ---- SafetensorsFile --------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;

  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(ErrorKind::bad_input, "{}: cannot open ({})", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(ErrorKind::bad_input, "{}: not a regular file", path);
  }
  const size_t file_bytes = size_t(st.st_size);
  // Checked before mmap: mapping zero bytes is an error of its own.
  if (file_bytes < 8) {
    ::close(fd);
    check_file_length(path, file_bytes);  // throws
  }
  void* map = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) {
    fail(ErrorKind::bad_input, "{}: mmap failed ({})", path, std::strerror(map_errno));
  }
  f.map_ = map;
  f.map_bytes_ = file_bytes;  // from here on `f` unmaps if validation throws
  f.parse(static_cast<const std::byte*>(map), file_bytes);
  return f;
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<std::byte> bytes, std::string name) {
  SafetensorsFile f;
  f.path_ = std::move(name);
  f.owned_ = std::move(bytes);
  f.parse(f.owned_.data(), f.owned_.size());
  return f;  // moving a vector keeps its buffer, so the entries' pointers stay valid
}

SafetensorsFile SafetensorsFile::from_entries(std::vector<TensorEntry> entries,
                                              std::map<std::string, std::string> metadata,
                                              std::string name, DeviceReader read_device) {
  SafetensorsFile f;
  f.path_ = std::move(name);
  f.read_device_ = std::move(read_device);
  for (TensorEntry& e : entries) {
    check_tensor_name(f.path_, e.name);
    e.elem_size = dtype_size_or_fail(f.path_, e.name, e.dtype);
    check_shape_bytes(f.path_, e.name, e.dtype, e.shape, e.elem_size, e.bytes);
    if (e.bytes != 0 && e.data == nullptr)
      fail(ErrorKind::bad_input, "{}: tensor '{}' has {} bytes but no data", f.path_, e.name,
           e.bytes);
    const std::string key = e.name;
    if (!f.entries_.try_emplace(key, std::move(e)).second)  // moves `e` only on success
      fail(ErrorKind::bad_input, "{}: tensor '{}' given twice", f.path_, key);
  }
  f.metadata_ = std::move(metadata);
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept {
  *this = std::move(o);
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    unmap();
    // The mapping's address does not change, nor does a moved vector's
    // buffer, so the entries' data pointers stay valid in their new owner.
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    owned_ = std::move(o.owned_);
    o.owned_.clear();
    entries_ = std::move(o.entries_);
    metadata_ = std::move(o.metadata_);
    read_device_ = std::move(o.read_device_);
    o.entries_.clear();
    o.metadata_.clear();
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  unmap();
}

void SafetensorsFile::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  map_bytes_ = 0;
}

bool SafetensorsFile::contains(std::string_view name) const {
  return entries_.find(name) != entries_.end();
}

const TensorEntry& SafetensorsFile::entry(std::string_view name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) {
    fail(ErrorKind::bad_input, "{}: no tensor named '{}' ({} tensors in the file)", path_, name,
         entries_.size());
  }
  return it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& kv : entries_) out.push_back(kv.first);  // std::map: already sorted
  return out;
}

const TensorEntry& SafetensorsFile::checked_entry(std::string_view name,
                                                  std::string_view expect_dtype,
                                                  size_t elem_size) const {
  const TensorEntry& e = entry(name);
  if (e.dtype != expect_dtype) {
    fail(ErrorKind::bad_input, "{}: tensor '{}' is {}, expected {}", path_, name, e.dtype,
         expect_dtype);
  }
  if (e.elem_size != elem_size) {
    fail(ErrorKind::bad_input,
         "{}: tensor '{}' is {} ({} bytes per element), read as a {}-byte type", path_, name,
         e.dtype, e.elem_size, elem_size);
  }
  return e;
}

std::span<const std::byte> SafetensorsFile::host_bytes(const TensorEntry& e,
                                                       std::vector<std::byte>& scratch) const {
  if (e.device == Device::host) return {e.data, e.bytes};
  if (!read_device_)
    fail(ErrorKind::invalid_argument,
         "{}: tensor '{}' is in device memory and this reader cannot "
         "read it",
         path_, e.name);
  scratch.resize(e.bytes);
  if (e.bytes != 0) read_device_(e, scratch.data());
  return {scratch.data(), scratch.size()};
}

Tensor SafetensorsFile::view(std::string_view name) const {
  const TensorEntry& e = entry(name);
  if (e.device != Device::host)
    fail(ErrorKind::invalid_argument, "{}: tensor '{}' is in device memory: no host view", path_,
         name);
  const std::optional<DType> dtype = to_engine_dtype(e.dtype);
  if (!dtype) {
    fail(ErrorKind::bad_input, "{}: tensor '{}' is {}, which has no engine dtype", path_, name,
         e.dtype);
  }
  if (e.shape.size() > 4) {
    fail(ErrorKind::bad_input, "{}: tensor '{}' has shape {}: a view has at most 4 dimensions",
         path_, name, format_shape(e.shape));
  }
  // Typed loads through a misaligned pointer are undefined behaviour.
  if (reinterpret_cast<uintptr_t>(e.data) % e.elem_size != 0) {
    fail(ErrorKind::bad_input,
         "{}: tensor '{}' data is not {}-byte aligned in the file; copy it with read_as", path_,
         name, e.elem_size);
  }
  Tensor t;
  // const_cast: Tensor has no const view; the mapping is PROT_READ, so a write
  // through this view faults instead of corrupting the file (a from_bytes()
  // file's own bytes are not protected: callers must not write either way).
  t.data = const_cast<std::byte*>(e.data);
  t.dtype = *dtype;
  t.device = Device::host;
  t.rank = e.shape.empty() ? 1 : int(e.shape.size());
  for (size_t d = 0; d < e.shape.size(); ++d) t.shape[d] = e.shape[d];
  if (e.shape.empty()) t.shape[0] = 1;  // scalar -> [1]
  int64_t step = 1;
  for (int d = t.rank - 1; d >= 0; --d) {
    t.stride[size_t(d)] = step;
    step *= t.shape[size_t(d)];
  }
  return t;
}

}  // namespace h3s
