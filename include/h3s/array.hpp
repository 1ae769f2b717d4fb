// The arrays that cross h3stream's public API: ArrayRef views a caller's
// memory (never copied unless a call says so), Array owns what h3stream
// returns. Both are dense and row-major (C order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "h3s/dtype.hpp"

namespace h3s {

struct ArrayRef {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  // row-major, contiguous
  // Read only, except where a call says it updates the array in place
  // (Engine::run_block's x).
  const void* data = nullptr;
  Device device = Device::host;
  int device_index = 0;  // the GPU of a Device::cuda array

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype); }
};

struct Array {
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;  // host memory, row-major

  Array() = default;
  Array(DType t, std::vector<int64_t> s) : dtype(t), shape(std::move(s)) {
    bytes.resize(size_t(numel()) * dtype_size(dtype));
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  template <class T>
  T* data() {
    return reinterpret_cast<T*>(bytes.data());
  }
  template <class T>
  const T* data() const {
    return reinterpret_cast<const T*>(bytes.data());
  }
  ArrayRef ref() const { return ArrayRef{dtype, shape, bytes.data()}; }
};

}  // namespace h3s
