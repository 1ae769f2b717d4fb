#include "model/safetensors.hpp"

#include <fcntl.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.hpp"
#include "model/output_file.hpp"

namespace h3s {
namespace {

using nlohmann::json;

// A header this large is not a real checkpoint; refusing it bounds the parse.
constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // 100 MiB
constexpr char kMetadataKey[] = "__metadata__";

struct DTypeInfo {
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 12> kDTypes{{{"BF16", 2},
                                             {"F16", 2},
                                             {"F32", 4},
                                             {"F64", 8},
                                             {"I8", 1},
                                             {"U8", 1},
                                             {"I16", 2},
                                             {"I32", 4},
                                             {"I64", 8},
                                             {"F8_E4M3", 1},
                                             {"F8_E5M2", 1},
                                             {"BOOL", 1}}};

std::string format_shape(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// product(shape) * elem_size, or nullopt on size_t overflow (a hostile header
// must not wrap around and pass the byte-count check).
std::optional<size_t> byte_count(const std::vector<int64_t>& shape, size_t elem_size) {
  size_t n = elem_size;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, size_t(d), &n)) return std::nullopt;
  }
  return n;
}

// A JSON non-negative integer, or nullopt (negative, fractional, not a number).
std::optional<uint64_t> as_uint(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
  return std::nullopt;
}

// Parses the header bytes; rejects duplicate top-level keys, which a plain
// parse would silently resolve to the last one.
json parse_header(const std::string& path, const char* begin, const char* end) {
  std::set<std::string> seen;
  const json::parser_callback_t no_duplicates = [&](int depth, json::parse_event_t event,
                                                    json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key &&
        !seen.insert(parsed.get<std::string>()).second) {
      fail(ErrorKind::bad_input, "{}: header names '{}' twice", path, parsed.get<std::string>());
    }
    return true;
  };
  try {
    return json::parse(begin, end, no_duplicates);
  } catch (const json::exception& e) {
    fail(ErrorKind::bad_input, "{}: header is not valid JSON ({})", path, e.what());
  }
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& m) {
  if (!m.is_object()) {
    fail(ErrorKind::bad_input, "{}: '{}' must be an object of strings, found {}", path,
         kMetadataKey, m.type_name());
  }
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : m.items()) {
    if (!value.is_string()) {
      fail(ErrorKind::bad_input, "{}: metadata '{}' must be a string, found {}", path, key,
           value.type_name());
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// One tensor's header entry, checked against the data section size. `data` is
// filled in by the caller once every entry has passed.
TensorEntry parse_entry(const std::string& path, const std::string& name, const json& j,
                        size_t data_bytes, size_t& begin_out) {
  if (!j.is_object()) {
    fail(ErrorKind::bad_input, "{}: tensor '{}' must be an object, found {}", path, name,
         j.type_name());
  }
  TensorEntry e;
  e.name = name;

  const auto dtype = j.find("dtype");
  if (dtype == j.end() || !dtype->is_string()) {
    fail(ErrorKind::bad_input, "{}: tensor '{}' needs a string \"dtype\"", path, name);
  }
  e.dtype = dtype->get<std::string>();
  const std::optional<size_t> elem = safetensors_dtype_size(e.dtype);
  if (!elem) {
    fail(ErrorKind::bad_input,
         "{}: tensor '{}' has unknown dtype '{}' (expected one of BF16, F16, F32, F64, I8, U8, "
         "I16, I32, I64, F8_E4M3, F8_E5M2, BOOL)",
         path, name, e.dtype);
  }
  e.elem_size = *elem;

  const auto shape = j.find("shape");
  if (shape == j.end() || !shape->is_array()) {
    fail(ErrorKind::bad_input, "{}: tensor '{}' needs an array \"shape\"", path, name);
  }
  for (const json& d : *shape) {
    const std::optional<uint64_t> v = as_uint(d);
    if (!v || *v > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail(ErrorKind::bad_input,
           "{}: tensor '{}' has shape {}: expected non-negative integer dimensions", path, name,
           shape->dump());
    }
    e.shape.push_back(int64_t(*v));
  }

  const auto offsets = j.find("data_offsets");
  std::optional<uint64_t> begin, end;
  if (offsets != j.end() && offsets->is_array() && offsets->size() == 2) {
    begin = as_uint((*offsets)[0]);
    end = as_uint((*offsets)[1]);
  }
  if (!begin || !end || *begin > *end) {
    fail(ErrorKind::bad_input,
         "{}: tensor '{}' has data_offsets {}: expected [begin, end] with 0 <= begin <= end", path,
         name, offsets == j.end() ? std::string("missing") : offsets->dump());
  }
  if (*end > data_bytes) {
    fail(ErrorKind::bad_input,
         "{}: tensor '{}' has data_offsets [{}, {}] past the end of the {}-byte data section", path,
         name, *begin, *end, data_bytes);
  }
  e.bytes = size_t(*end - *begin);
  begin_out = size_t(*begin);

  const std::optional<size_t> need = byte_count(e.shape, e.elem_size);
  if (need != e.bytes) {
    fail(ErrorKind::bad_input, "{}: tensor '{}' has {} bytes but shape {} x {} needs {}", path,
         name, e.bytes, format_shape(e.shape), e.dtype,
         need ? std::to_string(*need) : std::string("more than 2^64"));
  }
  return e;
}

// Both readers refuse anything shorter than the 8-byte header length.
void check_file_length(const std::string& path, size_t file_bytes) {
  if (file_bytes < 8) {
    fail(ErrorKind::bad_input, "{}: file is {} bytes, too short for the 8-byte header length", path,
         file_bytes);
  }
}

}  // namespace

std::optional<size_t> safetensors_dtype_size(std::string_view dtype) {
  for (const DTypeInfo& d : kDTypes) {
    if (d.name == dtype) return d.size;
  }
  return std::nullopt;
}

std::optional<DType> to_engine_dtype(std::string_view dtype) {
  if (dtype == "BF16") return DType::bf16;
  if (dtype == "F16") return DType::f16;
  if (dtype == "F32") return DType::f32;
  if (dtype == "I8") return DType::i8;
  if (dtype == "U8") return DType::u8;
  if (dtype == "I32") return DType::i32;
  if (dtype == "F8_E4M3") return DType::f8e4m3;
  return std::nullopt;
}

std::string_view safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::f32:
      return "F32";
    case DType::i8:
      return "I8";
    case DType::i32:
      return "I32";
    case DType::u8:
    case DType::e2m1x2:
      return "U8";
    case DType::f8e4m3:
      return "F8_E4M3";
  }
  return "?";
}

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
    const std::optional<size_t> elem = safetensors_dtype_size(e.dtype);
    if (e.name.empty() || e.name == kMetadataKey)
      fail(ErrorKind::bad_input, "{}: invalid tensor name '{}'", f.path_, e.name);
    if (!elem)
      fail(ErrorKind::bad_input, "{}: tensor '{}' has unknown dtype '{}'", f.path_, e.name,
           e.dtype);
    if (std::any_of(e.shape.begin(), e.shape.end(), [](int64_t d) { return d < 0; }))
      fail(ErrorKind::bad_input, "{}: tensor '{}' has a negative dimension in shape {}", f.path_,
           e.name, format_shape(e.shape));
    const std::optional<size_t> need = byte_count(e.shape, *elem);
    if (need != e.bytes)
      fail(ErrorKind::bad_input, "{}: tensor '{}' has {} bytes but shape {} x {} needs {}", f.path_,
           e.name, e.bytes, format_shape(e.shape), e.dtype,
           need ? std::to_string(*need) : std::string("more than 2^64"));
    if (e.bytes != 0 && e.data == nullptr)
      fail(ErrorKind::bad_input, "{}: tensor '{}' has {} bytes but no data", f.path_, e.name,
           e.bytes);
    e.elem_size = *elem;
    const std::string key = e.name;
    if (!f.entries_.try_emplace(key, std::move(e)).second)  // moves `e` only on success
      fail(ErrorKind::bad_input, "{}: tensor '{}' given twice", f.path_, key);
  }
  f.metadata_ = std::move(metadata);
  return f;
}

void SafetensorsFile::parse(const std::byte* base, size_t file_bytes) {
  const std::string& path = path_;
  check_file_length(path, file_bytes);

  // Little-endian by the format, whatever the host order.
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | uint64_t(base[i]);
  if (header_bytes > file_bytes - 8) {
    fail(ErrorKind::bad_input, "{}: header length {} runs past the end of the {}-byte file", path,
         header_bytes, file_bytes);
  }
  if (header_bytes >= kMaxHeaderBytes) {
    fail(ErrorKind::bad_input, "{}: header length {} is not below the 100 MiB limit", path,
         header_bytes);
  }
  const auto* header = reinterpret_cast<const char*>(base + 8);
  const json j = parse_header(path, header, header + header_bytes);
  if (!j.is_object()) {
    fail(ErrorKind::bad_input, "{}: header must be a JSON object, found {}", path, j.type_name());
  }

  const std::byte* data = base + 8 + header_bytes;
  const size_t data_bytes = file_bytes - 8 - size_t(header_bytes);
  struct Range {
    size_t begin, end;
    const std::string* name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, value] : j.items()) {
    if (name == kMetadataKey) {
      metadata_ = parse_metadata(path, value);
      continue;
    }
    size_t begin = 0;
    TensorEntry e = parse_entry(path, name, value, data_bytes, begin);
    e.data = data + begin;
    const auto it = entries_.emplace(name, std::move(e)).first;
    ranges.push_back({begin, begin + it->second.bytes, &it->first});
  }

  // Overlap check: sorted by begin, each non-empty range must start at or after
  // the furthest end so far. Empty ranges hold no bytes and cannot overlap.
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  const Range* furthest = nullptr;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;
    if (furthest && r.begin < furthest->end) {
      fail(ErrorKind::bad_input, "{}: tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path,
           *furthest->name, furthest->begin, furthest->end, *r.name, r.begin, r.end);
    }
    if (!furthest || r.end > furthest->end) furthest = &r;
  }
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

// ---- writer -----------------------------------------------------------------

void write_safetensors(const std::string& path, const std::vector<WriteEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // Validate everything before creating any file.
  std::vector<const WriteEntry*> sorted;
  sorted.reserve(tensors.size());
  for (const WriteEntry& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const WriteEntry* a, const WriteEntry* b) { return a->name < b->name; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    const WriteEntry& t = *sorted[i];
    if (t.name.empty() || t.name == kMetadataKey) {
      fail(ErrorKind::bad_input, "{}: invalid tensor name '{}'", path, t.name);
    }
    if (i > 0 && sorted[i - 1]->name == t.name) {
      fail(ErrorKind::bad_input, "{}: tensor '{}' given twice", path, t.name);
    }
    const std::optional<size_t> elem = safetensors_dtype_size(t.dtype);
    if (!elem)
      fail(ErrorKind::bad_input, "{}: tensor '{}' has unknown dtype '{}'", path, t.name, t.dtype);
    if (std::any_of(t.shape.begin(), t.shape.end(), [](int64_t d) { return d < 0; })) {
      fail(ErrorKind::bad_input, "{}: tensor '{}' has negative dimension in shape {}", path, t.name,
           format_shape(t.shape));
    }
    const std::optional<size_t> need = byte_count(t.shape, *elem);
    if (need != t.bytes.size()) {
      fail(ErrorKind::bad_input, "{}: tensor '{}' has {} bytes but shape {} x {} needs {}", path,
           t.name, t.bytes.size(), format_shape(t.shape), t.dtype,
           need ? std::to_string(*need) : std::string("more than 2^64"));
    }
  }

  // The reference layout: tensors by element size (largest first), then name,
  // so every tensor starts aligned for its dtype and a reader can view it in
  // place (load_checkpoint's zero-copy arrays). ordered_json keeps metadata
  // first, then the tensors in data order, each as {dtype, shape, data_offsets}.
  std::stable_sort(sorted.begin(), sorted.end(), [](const WriteEntry* a, const WriteEntry* b) {
    return *safetensors_dtype_size(a->dtype) > *safetensors_dtype_size(b->dtype);
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  size_t offset = 0;
  for (const WriteEntry* t : sorted) {
    header[t->name] = {{"dtype", t->dtype},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + t->bytes.size()}}};
    offset += t->bytes.size();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    fail(ErrorKind::bad_input, "{}: cannot encode header ({})", path, e.what());
  }
  // Pad so the data section starts 8-byte aligned, as the reference does.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::array<char, 8> len{};
  for (size_t i = 0; i < 8; ++i) len[i] = char((uint64_t(text.size()) >> (8 * i)) & 0xffu);

  write_file_atomically(path, [&](const std::string& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return false;
    out.write(len.data(), std::streamsize(len.size()));
    out.write(text.data(), std::streamsize(text.size()));
    for (const WriteEntry* t : sorted)
      out.write(reinterpret_cast<const char*>(t->bytes.data()), std::streamsize(t->bytes.size()));
    out.close();
    return !out.fail();
  });
}

}  // namespace h3s
