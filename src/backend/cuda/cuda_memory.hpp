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
#include <map>
#include <mutex>
#include <vector>

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

// PinnedMemory: page-locked host memory for staging (Backend::
// host_staging_memory), so copies to and from the device are DMA at
// copy-engine speed. Freed blocks are kept and handed out again for a request
// of the same rounded size: pinning costs ~0.2 s per GiB, and the placement
// planner asks for the same K/V store every block. The cache is released when
// the memory resource is destroyed (with its backend).
class PinnedMemory final : public MemoryResource {
 public:
  static constexpr size_t kGranule = size_t(2) << 20;  // sizes round up to 2 MiB
  PinnedMemory() = default;
  ~PinnedMemory() override;
  PinnedMemory(const PinnedMemory&) = delete;
  PinnedMemory& operator=(const PinnedMemory&) = delete;

  // Throws Error(out_of_memory) naming the request and the CUDA error.
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  Device device() const override { return Device::host; }
  size_t cached_bytes() const;

 private:
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // rounded size -> cached blocks
};

}  // namespace h3s::cuda
