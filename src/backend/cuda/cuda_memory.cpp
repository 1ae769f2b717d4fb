// CudaMemory, and the error reporting that the kernels' launchers share
// (common.cuh declares fail_cuda and fail_internal for code nvcc compiles).
#include "backend/cuda/cuda_memory.hpp"

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "core/error.hpp"

namespace h3s::cuda {

void fail_cuda(const char* what, cudaError_t err) {
  fail(ErrorKind::internal, "{}: CUDA error {} ({})", what, cudaGetErrorName(err),
       cudaGetErrorString(err));
}

void fail_internal(const char* what) {
  fail(ErrorKind::internal, "internal error in the CUDA backend: {}", what);
}

CudaMemory::CudaMemory(cudaStream_t stream) : stream_(stream), stream_ordered_(true) {
  int device = 0;
  cudaMemPool_t pool = nullptr;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess)
    fail_cuda("cuda memory: default memory pool", cudaGetLastError());
  uint64_t keep = UINT64_MAX;
  const cudaError_t e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e != cudaSuccess) fail_cuda("cuda memory: pool release threshold", e);
}

void* CudaMemory::allocate(size_t bytes) {
  // One byte for an empty request, so every allocation has its own address.
  const size_t n = bytes == 0 ? 1 : bytes;
  void* p = nullptr;
  const cudaError_t e = stream_ordered_ ? cudaMallocAsync(&p, n, stream_) : cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: keep it from being blamed on the next launch
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) (void)cudaGetLastError();
    fail(ErrorKind::out_of_memory,
         "cuda: cannot allocate {} ({} bytes) of device memory: {} ({}); {} of {} free",
         format_bytes(bytes), bytes, cudaGetErrorName(e), cudaGetErrorString(e),
         format_bytes(free_b), format_bytes(total_b));
  }
  return p;
}

void CudaMemory::deallocate(void* p, size_t) {
  if (!p) return;
  if (stream_ordered_)
    (void)cudaFreeAsync(p, stream_);
  else
    (void)cudaFree(p);
}

}  // namespace h3s::cuda
