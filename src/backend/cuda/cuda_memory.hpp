// CudaMemory: device memory for an Arena (and for CudaBackend's weight cache).
//
// Two modes. Plain (default): cudaMalloc / cudaFree; cudaFree waits for the
// device to finish its queued work, so freeing a buffer that kernels still
// use is safe, at the price of a synchronisation per free. Stream-ordered
// (constructed with a stream): cudaMallocAsync / cudaFreeAsync on that stream
// through the device's default memory pool; no waits, and a freed block is
// reused only by work queued after the free on the same stream. Give it the
// stream the backend runs on (make_cuda_backend's `stream`): memory freed on
// another stream could be handed out while this one still reads it.
#pragma once

#include <cstddef>

#include "core/arena.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace h3s::cuda {

class CudaMemory final : public MemoryResource {
 public:
  CudaMemory() = default;
  // Stream-ordered on `stream`. Raises the release threshold of the current
  // device's default memory pool to "never", so blocks freed between chunks
  // stay pooled instead of going back to the driver at every synchronisation
  // (the Arena's budget, not the pool, bounds what is in use).
  explicit CudaMemory(cudaStream_t stream);

  // Throws Error(out_of_memory) naming the request and the CUDA error.
  void* allocate(size_t bytes) override;
  // Never throws (it runs in destructors); a failure here resurfaces as the
  // sticky error of the next CUDA call.
  void deallocate(void* p, size_t bytes) override;
  Device device() const override { return Device::cuda; }

  bool stream_ordered() const { return stream_ordered_; }

 private:
  cudaStream_t stream_ = nullptr;
  bool stream_ordered_ = false;
};

}  // namespace h3s::cuda
