// The safetensors reader's parse: the header's JSON, its metadata and every
// tensor entry checked against the data section, then the overlap check.
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "model/safetensors_format.hpp"

namespace h3s {
namespace {

using nlohmann::json;
using namespace safetensors_format;

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
  e.elem_size = dtype_size_or_fail(path, name, e.dtype);

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

  check_shape_bytes(path, name, e.dtype, e.shape, e.elem_size, e.bytes);
  return e;
}

}  // namespace

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

}  // namespace h3s
