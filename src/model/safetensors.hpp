// Safetensors files: a read-only memory-mapped reader and an atomic writer.
//
// Format: 8-byte little-endian header length N, N bytes of JSON header, then
// the data section. The header maps each tensor name to {dtype, shape,
// data_offsets: [begin, end)} (offsets relative to the data section), plus an
// optional "__metadata__" object of string -> string.
//
// open() (and from_bytes(), its in-memory twin) validates the whole header
// before any tensor is touched, so every entry handed out afterwards is known
// to lie inside the file, to have exactly product(shape) x element-size bytes
// and to overlap no other tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
#include "core/tensor.hpp"

namespace h3s {

// Element size in bytes of a known safetensors dtype name ("BF16", "F32", ...);
// nullopt for an unknown name.
std::optional<size_t> safetensors_dtype_size(std::string_view dtype);

// The engine dtype of a safetensors dtype name; nullopt when the engine has no
// such type (F64, I16, I64, F8_E5M2, BOOL, or unknown).
std::optional<DType> to_engine_dtype(std::string_view dtype);
// The safetensors name of an engine dtype (e2m1 pairs are bytes: "U8").
std::string_view safetensors_dtype_name(DType t);

struct TensorEntry {
  std::string name;
  std::string dtype;  // safetensors spelling, e.g. "BF16"
  size_t elem_size = 0;
  std::vector<int64_t> shape;       // empty for a scalar
  const std::byte* data = nullptr;  // into the mapping (or owned bytes): valid while open
  size_t bytes = 0;
  Device device = Device::host;  // from_entries() may hold device memory (never dereferenced)
};

// Copies a device entry's bytes to host memory at `dst` (entry.bytes bytes):
// how a reader over a host framework's CUDA tensors reads the values it
// validates (scales, biases) without touching the weights themselves.
using DeviceReader = std::function<void(const TensorEntry& entry, void* dst)>;

class SafetensorsFile {
 public:
  // Maps `path` read-only and validates its header. Throws Error(bad_input)
  // naming the file (and tensor) on any problem.
  static SafetensorsFile open(const std::string& path);
  // The same reader over bytes already in memory (fuzzing, tests): takes
  // ownership of `bytes` and validates them exactly as open() validates a
  // file; `name` stands in for the path in messages and path().
  static SafetensorsFile from_bytes(std::vector<std::byte> bytes, std::string name);
  // The same reader over tensors that already sit in memory (a framework's
  // state dict handed over by the Python module), so they go through the very
  // loader and checks a file does. The entries' data is BORROWED: it must stay
  // alive and unchanged while the reader is used. Each entry is validated as
  // a header entry is (known dtype, element size, bytes == product(shape) x
  // element size, a name given once); `name` stands in for the path.
  // Entries may sit in device memory (entry.device): their bytes are read
  // only through `read_device`, and only where a value must be checked.
  static SafetensorsFile from_entries(std::vector<TensorEntry> entries,
                                      std::map<std::string, std::string> metadata, std::string name,
                                      DeviceReader read_device = {});

  SafetensorsFile(SafetensorsFile&& o) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& o) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  bool contains(std::string_view name) const;
  // Throws Error(bad_input) naming the file and the missing tensor.
  const TensorEntry& entry(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

  // The entry's bytes in host memory: its own for a host entry, else a copy
  // through the DeviceReader into `scratch` (throws when there is none).
  std::span<const std::byte> host_bytes(const TensorEntry& e,
                                        std::vector<std::byte>& scratch) const;

  // A copy of the tensor's elements. Checks that its dtype is `expect_dtype`
  // and that T has the dtype's element size; memcpy, so any alignment works.
  template <class T>
  std::vector<T> read_as(std::string_view name, std::string_view expect_dtype) const {
    static_assert(std::is_trivially_copyable_v<T> && !std::is_same_v<T, bool>,
                  "read_as needs a trivially copyable T (not bool: vector<bool> is packed)");
    const TensorEntry& e = checked_entry(name, expect_dtype, sizeof(T));
    std::vector<std::byte> scratch;
    const std::span<const std::byte> b = host_bytes(e, scratch);
    std::vector<T> out(e.bytes / sizeof(T));
    if (e.bytes != 0) std::memcpy(out.data(), b.data(), e.bytes);
    return out;
  }

  // A contiguous host Tensor over the mapped bytes, for engine dtypes and
  // ranks 0..4 (a scalar becomes shape [1]). The memory is mapped read-only
  // (or owned by a from_bytes() file): the view must never be written
  // through. Throws for other dtypes or ranks, and when the data is not
  // aligned to its element size (use read_as).
  Tensor view(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  void unmap() noexcept;
  // The one validation path of open() and from_bytes(): parses the `size`
  // bytes at `base` (the whole file) into entries_ and metadata_.
  void parse(const std::byte* base, size_t size);
  const TensorEntry& checked_entry(std::string_view name, std::string_view expect_dtype,
                                   size_t elem_size) const;

  std::string path_;
  void* map_ = nullptr;  // the whole file, PROT_READ
  size_t map_bytes_ = 0;
  std::vector<std::byte> owned_;  // from_bytes(): the file itself (map_ is null)
  std::map<std::string, TensorEntry, std::less<>> entries_;  // less<>: lookup by string_view
  std::map<std::string, std::string> metadata_;
  DeviceReader read_device_;
};

struct WriteEntry {
  std::string name;
  std::string dtype;  // safetensors spelling
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

// Writes a safetensors file: header sorted by name, data contiguous in that
// order, header padded with spaces to a multiple of 8 bytes (as the reference
// implementation does). Validates names, dtypes and byte counts first; writes
// a temporary file beside `path` and renames it (output_file.hpp), so a
// failure or an interrupt never leaves a partial file.
void write_safetensors(const std::string& path, const std::vector<WriteEntry>& tensors,
                       const std::map<std::string, std::string>& metadata);

}  // namespace h3s
