// Element types of the arrays h3stream reads and writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace h3s {

// e2m1x2: one byte holding two fp4 (e2m1) values, low nibble first.
enum class DType : uint8_t { bf16, f16, f32, i8, i32, u8, f8e4m3, e2m1x2 };

// Bytes per element (e2m1x2: per pair).
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::bf16:
    case DType::f16:
      return 2;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::i8:
    case DType::u8:
    case DType::f8e4m3:
    case DType::e2m1x2:
      return 1;
  }
  return 0;
}

// "bf16", "f32", ...
std::string_view dtype_name(DType t);

// Where an array's memory lives.
enum class Device : uint8_t { host, cuda };

}  // namespace h3s
