// device_arch.hpp: per-device answers, computed once per device (host code;
// the image probe lives in device_arch_probe.cu).
#include "backend/cuda/arch/device_arch.hpp"

#include <cuda_runtime.h>

#include <array>
#include <atomic>

#include "backend/cuda/arch/device_arch_probe.hpp"
#include "core/error.hpp"

namespace h3s::cuda::arch {

namespace {

constexpr int kMaxDevices = 64;

int current_device() {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  return dev;
}

int attribute(cudaDeviceAttr a, int dev) {
  int v = 0;
  if (cudaDeviceGetAttribute(&v, a, dev) != cudaSuccess) return 0;
  return v;
}

// One cached integer per device (-1: not asked yet). Racing threads may
// both compute it: they compute the same value.
struct DeviceCache {
  std::array<std::atomic<int>, kMaxDevices> value;
  DeviceCache() {
    for (auto& v : value) v.store(-1);
  }
};

template <class F>
int per_device(DeviceCache& cache, F compute) {
  const int dev = current_device();
  if (dev < 0 || dev >= kMaxDevices) return compute(dev);
  int v = cache.value[size_t(dev)].load(std::memory_order_relaxed);
  if (v < 0) {
    v = compute(dev);
    cache.value[size_t(dev)].store(v, std::memory_order_relaxed);
  }
  return v;
}

}  // namespace

int device_compute_capability() {
  static DeviceCache cache;
  return per_device(cache, [](int dev) {
    if (dev < 0) return 0;
    return attribute(cudaDevAttrComputeCapabilityMajor, dev) * 10 +
           attribute(cudaDevAttrComputeCapabilityMinor, dev);
  });
}

bool hopper_kernels() {
  static DeviceCache cache;
  return per_device(cache, [](int dev) {
           if (dev < 0 || device_compute_capability() != 90) return 0;
           return image_ptx_version() >= 90 ? 1 : 0;
         }) == 1;
}

int max_dynamic_smem_bytes() {
  static DeviceCache cache;
  return per_device(cache, [](int dev) {
    return dev < 0 ? 0 : attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  });
}

int smem_per_sm_bytes() {
  static DeviceCache cache;
  return per_device(cache, [](int dev) {
    return dev < 0 ? 0 : attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
  });
}

void expect_supported_device() {
  const int dev = current_device();
  const int cc = device_compute_capability();
  if (cc >= kMinComputeCapability) return;
  cudaDeviceProp prop{};
  const char* name = cudaGetDeviceProperties(&prop, dev) == cudaSuccess ? prop.name : "?";
  fail(ErrorKind::invalid_argument,
       "cuda device {} ({}) has compute capability {}.{}; the CUDA backend needs {}.{} or newer "
       "(Ampere, Ada, Hopper, Blackwell): use the cpu backend on this machine",
       dev, name, cc / 10, cc % 10, kMinComputeCapability / 10, kMinComputeCapability % 10);
}

}  // namespace h3s::cuda::arch
