// CudaWeightStore: device memory for prepared weights (backend/weight_store.hpp)
// with its own copy stream, so uploads overlap the compute stream's kernels.
//
//  - memory: one cudaMalloc slab of `capacity` bytes, bump-allocated and
//    reused after reset() (no cudaFree, whose device-wide wait would stall a
//    prefetch); capacity 0: one cudaMalloc per array, freed by reset().
//  - host sources go through two pinned staging buffers (kStageBytes each):
//    the caller's pageable memory (a mapped file) is memcpy'd into one while
//    the other's DMA runs, so a prefetch thread streams at copy-engine speed.
//  - readiness: seal() records `ready` on the copy stream; the backend makes
//    its compute stream wait on it (Backend::wait_ready). Reuse: release()
//    records `free` on the compute stream; the first copy after reset() waits
//    on it, so a slot is never overwritten while a kernel still reads it.
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "backend/weight_store.hpp"

namespace h3s::cuda {

class CudaWeightStore final : public WeightStore {
 public:
  static constexpr size_t kStageBytes = size_t(32) << 20;

  CudaWeightStore(std::string name, size_t capacity, int device);
  ~CudaWeightStore() override;

  void reset() override;
  void seal() override;

  // Device memory for `bytes` (aligned to WeightStore::kAlign).
  void* allocate(size_t bytes);
  // Copies `bytes` from host or device memory into store memory on the copy
  // stream; host bytes are staged, so `src` may change once this returns.
  void copy_in(void* dst, const void* src, size_t bytes, Device src_device);
  // Later copies start after the work queued on `stream` so far (a device
  // source written there).
  void order_after(cudaStream_t stream);
  // The copy stream, for a kernel that writes store memory (the NVFP4
  // decode): its work is ordered like a copy_in and covered by seal().
  cudaStream_t writer();

  // For the backend: the compute stream waits for the last seal(); and after
  // release() the next reset's copies wait for the compute stream.
  void make_wait(cudaStream_t compute);
  void record_free(cudaStream_t compute);
  int device() const { return device_; }

 private:
  void before_copy();
  struct Stage {
    void* host = nullptr;
    cudaEvent_t done = nullptr;
    bool busy = false;
  };
  int device_ = 0;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t ready_ = nullptr, free_ = nullptr, order_ = nullptr;
  bool sealed_ = false, free_recorded_ = false, wait_free_ = false;
  void* slab_ = nullptr;
  std::vector<std::pair<void*, size_t>> arrays_;
  std::array<Stage, 2> stages_{};
  size_t next_stage_ = 0;
};

}  // namespace h3s::cuda
