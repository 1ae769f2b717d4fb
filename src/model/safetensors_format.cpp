// The safetensors dtype table and the checks of one declared tensor
// (safetensors_format.hpp).
#include "model/safetensors_format.hpp"

#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "core/error.hpp"
#include "model/safetensors.hpp"

namespace h3s {
namespace {

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

namespace safetensors_format {

std::string format_shape(const std::vector<int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

std::optional<size_t> byte_count(const std::vector<int64_t>& shape, size_t elem_size) {
  size_t n = elem_size;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, size_t(d), &n)) return std::nullopt;
  }
  return n;
}

void check_file_length(const std::string& path, size_t file_bytes) {
  if (file_bytes < 8) {
    fail(ErrorKind::bad_input, "{}: file is {} bytes, too short for the 8-byte header length", path,
         file_bytes);
  }
}

void check_tensor_name(const std::string& path, const std::string& name) {
  if (name.empty() || name == kMetadataKey)
    fail(ErrorKind::bad_input, "{}: invalid tensor name '{}'", path, name);
}

size_t dtype_size_or_fail(const std::string& path, const std::string& name,
                          const std::string& dtype) {
  const std::optional<size_t> elem = safetensors_dtype_size(dtype);
  if (!elem) {
    std::vector<std::string_view> known;
    for (const DTypeInfo& d : kDTypes) known.push_back(d.name);
    fail(ErrorKind::bad_input, "{}: tensor '{}' has unknown dtype '{}' (expected one of {})", path,
         name, dtype, fmt::join(known, ", "));
  }
  return *elem;
}

void check_shape_bytes(const std::string& path, const std::string& name, const std::string& dtype,
                       const std::vector<int64_t>& shape, size_t elem_size, size_t bytes) {
  if (std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 0; }))
    fail(ErrorKind::bad_input, "{}: tensor '{}' has a negative dimension in shape {}", path, name,
         format_shape(shape));
  const std::optional<size_t> need = byte_count(shape, elem_size);
  if (need != bytes)
    fail(ErrorKind::bad_input, "{}: tensor '{}' has {} bytes but shape {} x {} needs {}", path,
         name, bytes, format_shape(shape), dtype,
         need ? std::to_string(*need) : std::string("more than 2^64"));
}

}  // namespace safetensors_format
}  // namespace h3s
