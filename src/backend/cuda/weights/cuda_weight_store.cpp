// CudaWeightStore (see cuda_weight_store.hpp).
#include "backend/cuda/weights/cuda_weight_store.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/cuda/cuda_device.hpp"
#include "core/arena.hpp"
#include "core/error.hpp"

namespace h3s::cuda {

[[noreturn]] void fail_cuda(const char* what, cudaError_t err);  // cuda_memory.cpp

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail_cuda(what, e);
}
}  // namespace

CudaWeightStore::CudaWeightStore(std::string name, size_t capacity, int device)
    : WeightStore(std::move(name), capacity, Device::cuda), device_(device) {
  const DeviceGuard on(device_);
  check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "weight store: copy stream");
  check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "weight store: event");
  check(cudaEventCreateWithFlags(&free_, cudaEventDisableTiming), "weight store: event");
  check(cudaEventCreateWithFlags(&order_, cudaEventDisableTiming), "weight store: event");
  if (capacity != 0) {
    const cudaError_t e = cudaMalloc(&slab_, capacity);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail(ErrorKind::out_of_memory,
           "weight store '{}': cannot allocate its {} of device memory ({})", this->name(),
           format_bytes(capacity), cudaGetErrorString(e));
    }
  }
}

CudaWeightStore::~CudaWeightStore() {
  std::unique_ptr<DeviceGuard> on;
  try {
    on = std::make_unique<DeviceGuard>(device_);
  } catch (const Error&) {  // the device vanished: free what can be freed
  }
  (void)cudaStreamSynchronize(copy_);
  for (auto& [p, n] : arrays_) (void)cudaFree(p);
  if (slab_) (void)cudaFree(slab_);
  for (Stage& s : stages_) {
    if (s.host) (void)cudaFreeHost(s.host);
    if (s.done) (void)cudaEventDestroy(s.done);
  }
  for (cudaEvent_t e : {ready_, free_, order_})
    if (e) (void)cudaEventDestroy(e);
  if (copy_) (void)cudaStreamDestroy(copy_);
}

void CudaWeightStore::reset() {
  WeightStore::reset();
  if (!arrays_.empty()) {
    const DeviceGuard on(device_);
    check(cudaStreamSynchronize(copy_), "weight store: reset");
    for (auto& [p, n] : arrays_) (void)cudaFree(p);  // waits for kernels still reading them
    arrays_.clear();
  }
  wait_free_ = free_recorded_;
}

void CudaWeightStore::seal() {
  const DeviceGuard on(device_);
  check(cudaEventRecord(ready_, copy_), "weight store: seal");
  sealed_ = true;
  WeightStore::seal();
}

void* CudaWeightStore::allocate(size_t bytes) {
  const size_t at = take(bytes);
  if (slab_) return static_cast<std::byte*>(slab_) + at;
  const DeviceGuard on(device_);
  void* p = nullptr;
  const size_t n = aligned(bytes);
  const cudaError_t e = cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorKind::out_of_memory, "weight store '{}': cannot allocate {} of device memory ({})",
         name(), format_bytes(n), cudaGetErrorString(e));
  }
  arrays_.emplace_back(p, n);
  return p;
}

void CudaWeightStore::before_copy() {  // the caller holds a DeviceGuard
  if (wait_free_) {                    // the slot's previous weights may still be read by kernels
    check(cudaStreamWaitEvent(copy_, free_, 0), "weight store: wait for release");
    wait_free_ = false;
  }
}

void CudaWeightStore::order_after(cudaStream_t stream) {
  const DeviceGuard on(device_);
  check(cudaEventRecord(order_, stream), "weight store: order");
  check(cudaStreamWaitEvent(copy_, order_, 0), "weight store: order");
}

cudaStream_t CudaWeightStore::writer() {
  const DeviceGuard on(device_);
  before_copy();
  return copy_;
}

void CudaWeightStore::copy_in(void* dst, const void* src, size_t bytes, Device src_device) {
  if (bytes == 0) return;
  const DeviceGuard on(device_);
  before_copy();
  if (src_device == Device::cuda) {
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, copy_), "weight store: copy");
    return;
  }
  for (size_t off = 0; off < bytes; off += kStageBytes) {
    const size_t n = std::min(kStageBytes, bytes - off);
    Stage& s = stages_[next_stage_];
    next_stage_ = (next_stage_ + 1) % stages_.size();
    if (!s.host) {
      check(cudaHostAlloc(&s.host, kStageBytes, cudaHostAllocDefault),
            "weight store: pinned stage");
      check(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming), "weight store: event");
    }
    if (s.busy) check(cudaEventSynchronize(s.done), "weight store: stage");
    std::memcpy(s.host, static_cast<const std::byte*>(src) + off, n);
    check(cudaMemcpyAsync(static_cast<std::byte*>(dst) + off, s.host, n, cudaMemcpyHostToDevice,
                          copy_),
          "weight store: upload");
    check(cudaEventRecord(s.done, copy_), "weight store: event");
    s.busy = true;
  }
}

void CudaWeightStore::make_wait(cudaStream_t compute) {
  if (!sealed_) return;
  const DeviceGuard on(device_);
  check(cudaStreamWaitEvent(compute, ready_, 0), "weight store: wait");
}

void CudaWeightStore::record_free(cudaStream_t compute) {
  const DeviceGuard on(device_);
  check(cudaEventRecord(free_, compute), "weight store: release");
  free_recorded_ = true;
}

}  // namespace h3s::cuda
