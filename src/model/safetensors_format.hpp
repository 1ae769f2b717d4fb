// What the safetensors format allows, shared by the reader (safetensors.cpp,
// safetensors_parse.cpp) and the writer (safetensors_write.cpp): the dtype
// table, the header's limits, and the checks every declared tensor passes
// whichever side declares it, each failing with the file and the tensor named.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace h3s::safetensors_format {

inline constexpr char kMetadataKey[] = "__metadata__";
// A header this large is not a real checkpoint; refusing it bounds the parse.
inline constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // 100 MiB

std::string format_shape(const std::vector<int64_t>& shape);
// product(shape) * elem_size, or nullopt on size_t overflow (a hostile header
// must not wrap around and pass the byte-count check).
std::optional<size_t> byte_count(const std::vector<int64_t>& shape, size_t elem_size);

// Both readers refuse anything shorter than the 8-byte header length.
void check_file_length(const std::string& path, size_t file_bytes);
// Not empty and not the metadata key.
void check_tensor_name(const std::string& path, const std::string& name);
// The element size of a known dtype; fails listing the known ones.
size_t dtype_size_or_fail(const std::string& path, const std::string& name,
                          const std::string& dtype);
// Every dimension >= 0 and product(shape) x elem_size == bytes.
void check_shape_bytes(const std::string& path, const std::string& name, const std::string& dtype,
                       const std::vector<int64_t>& shape, size_t elem_size, size_t bytes);

}  // namespace h3s::safetensors_format
