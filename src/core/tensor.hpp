// Tensor: a non-owning view of memory (dtype, shape, strides, device).
//
// Conventions: up to 4 dimensions, row-major by default; `shape[i]` counts
// elements and `stride[i]` is the step in ELEMENTS (not bytes) between
// neighbours along dimension i. A 2-D activation [rows, cols] has
// stride = {row_stride, 1}; a row-chunk is a view with an offset data pointer
// and fewer rows, never a copy. Offsets are 64-bit everywhere: a 300k-token
// sequence x 21504 features exceeds 2^31 elements.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace h3s {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device = Device::host;
  int rank = 0;
  std::array<int64_t, 4> shape{};
  std::array<int64_t, 4> stride{};

  static Tensor contiguous(void* data, DType dtype, std::initializer_list<int64_t> shape,
                           Device device = Device::host) {
    Tensor t;
    t.data = data;
    t.dtype = dtype;
    t.device = device;
    t.rank = int(shape.size());
    H3S_CHECK(t.rank >= 1 && t.rank <= 4);
    int i = 0;
    for (int64_t s : shape) t.shape[size_t(i++)] = s;
    int64_t step = 1;
    for (int d = t.rank - 1; d >= 0; --d) {
      t.stride[size_t(d)] = step;
      step *= t.shape[size_t(d)];
    }
    return t;
  }

  int64_t rows() const { return shape[0]; }
  int64_t cols() const { return rank >= 2 ? shape[1] : 1; }
  int64_t row_stride() const { return stride[0]; }
  int64_t numel() const {
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[size_t(d)];
    return n;
  }
  bool is_contiguous() const {
    int64_t step = 1;
    for (int d = rank - 1; d >= 0; --d) {
      if (shape[size_t(d)] != 1 && stride[size_t(d)] != step) return false;
      step *= shape[size_t(d)];
    }
    return true;
  }

  template <typename T>
  T* ptr() const {
    return static_cast<T*>(data);
  }
  template <typename T>
  T* row(int64_t r) const {
    return static_cast<T*>(data) + r * stride[0];
  }

  // Rows [begin, end) of dimension 0, as a view.
  Tensor rows_view(int64_t begin, int64_t end) const {
    H3S_CHECK(begin >= 0 && begin <= end && end <= shape[0]);
    Tensor t = *this;
    t.data = static_cast<char*>(data) + begin * stride[0] * int64_t(dtype_size(dtype));
    t.shape[0] = end - begin;
    return t;
  }
  // Columns [begin, end) of a 2-D tensor, as a view.
  Tensor cols_view(int64_t begin, int64_t end) const {
    H3S_CHECK(rank == 2 && begin >= 0 && begin <= end && end <= shape[1]);
    Tensor t = *this;
    t.data = static_cast<char*>(data) + begin * stride[1] * int64_t(dtype_size(dtype));
    t.shape[1] = end - begin;
    return t;
  }
};

}  // namespace h3s
