// Strided copy of a view of up to 4 dimensions with a unit-stride innermost
// dimension, as one kernel. CudaBackend::copy uses it where the copy engine
// would need one call per outer index: writing a [rows, heads, 128] K/V chunk
// into the [heads, seq, 128] store is rows x heads 256-byte pieces, which as
// cudaMemcpy2DAsync calls cost ~2 s of launch overhead at 217k tokens.
//
// A copy moves bytes, so every element arrives unchanged; the shape of the
// launch has no bearing on the values.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t(1) << 20;  // grid-stride beyond this

// Outer index -> element offset for the dimensions above the innermost one.
struct OuterDims {
  int64_t shape[3];  // outer dims, padded with 1 at the front
  int64_t xs[3], ys[3];
};

__device__ __forceinline__ void outer_offsets(const OuterDims& d, int64_t row, int64_t& xo,
                                              int64_t& yo) {
  const int64_t i2 = row % d.shape[2];
  const int64_t rest = row / d.shape[2];
  const int64_t i1 = rest % d.shape[1];
  const int64_t i0 = rest / d.shape[1];
  xo = i0 * d.xs[0] + i1 * d.xs[1] + i2 * d.xs[2];
  yo = i0 * d.ys[0] + i1 * d.ys[1] + i2 * d.ys[2];
}

// T: the unit moved per thread (uint4 when everything is 16-byte aligned,
// else the element type's size). Offsets are in units of T.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    copy_strided_kernel(const T* __restrict__ x, T* __restrict__ y, OuterDims d, int64_t units,
                        int64_t rows) {
  const int64_t total = rows * units;
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * kThreads) {
    const int64_t row = i / units, u = i % units;
    int64_t xo, yo;
    outer_offsets(d, row, xo, yo);
    y[yo + u] = x[xo + u];
  }
}

template <typename T>
void launch(const void* x, void* y, const OuterDims& elem_dims, int64_t width_bytes, int64_t rows,
            cudaStream_t s) {
  constexpr int64_t kUnit = int64_t(sizeof(T));
  OuterDims d = elem_dims;  // strides arrive in bytes; convert to units of T
  for (int i = 0; i < 3; ++i) {
    d.xs[i] /= kUnit;
    d.ys[i] /= kUnit;
  }
  const int64_t units = width_bytes / kUnit;
  const int64_t blocks = std::min<int64_t>(kMaxBlocks, (rows * units + kThreads - 1) / kThreads);
  copy_strided_kernel<T><<<unsigned(blocks), kThreads, 0, s>>>(static_cast<const T*>(x),
                                                               static_cast<T*>(y), d, units, rows);
  check_launch("copy_strided");
}

}  // namespace

void copy_strided(const void* x, const int64_t* x_stride_bytes, void* y,
                  const int64_t* y_stride_bytes, const int64_t* shape, int rank, int64_t elem_bytes,
                  cudaStream_t s) {
  if (rank < 1 || rank > 4) fail_internal("copy_strided: rank must be 1..4");
  OuterDims d{{1, 1, 1}, {0, 0, 0}, {0, 0, 0}};
  int64_t rows = 1;
  for (int i = 0; i < rank - 1; ++i) {  // right-align the outer dims into d
    const int slot = 3 - (rank - 1) + i;
    d.shape[slot] = shape[i];
    d.xs[slot] = x_stride_bytes[i];
    d.ys[slot] = y_stride_bytes[i];
    rows *= shape[i];
  }
  const int64_t width = shape[rank - 1] * elem_bytes;
  if (rows == 0 || width == 0) return;
  // 16-byte units when the base pointers, the row width and every outer
  // stride allow it (the K/V store case); element-sized units otherwise.
  bool vec = width % 16 == 0 && aligned_to(x, 16) && aligned_to(y, 16);
  for (int i = 0; i < 3; ++i) vec = vec && d.xs[i] % 16 == 0 && d.ys[i] % 16 == 0;
  if (vec) return launch<uint4>(x, y, d, width, rows, s);
  switch (elem_bytes) {
    case 1:
      return launch<uint8_t>(x, y, d, width, rows, s);
    case 2:
      return launch<uint16_t>(x, y, d, width, rows, s);
    case 4:
      return launch<uint32_t>(x, y, d, width, rows, s);
    case 8:
      return launch<uint64_t>(x, y, d, width, rows, s);
    default:
      fail_internal("copy_strided: element size must be 1, 2, 4 or 8 bytes");
  }
}

}  // namespace h3s::cuda
