// Device selection helpers (cuda_device.hpp).
#include "backend/cuda/cuda_device.hpp"

#include <cuda_runtime.h>

#include "core/error.hpp"

namespace h3s::cuda {

// Defined in cuda_memory.cpp.
[[noreturn]] void fail_cuda(const char* what, cudaError_t err);

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the non-sticky "no device / no driver" error
    return 0;
  }
  return n;
}

int runtime_version() {
  return CUDART_VERSION;
}

int driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) return 0;  // sets 0 itself without a driver
  return v;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "?";
  }
  return prop.name;
}

DeviceGuard::DeviceGuard(int device) {
  const int n = device_count();
  if (n == 0)
    fail(ErrorKind::invalid_argument,
         "cuda device {} does not exist: no CUDA device is visible (no GPU, no driver, or "
         "CUDA_VISIBLE_DEVICES hides them; nvidia-smi tells which); use the cpu backend",
         device);
  if (device < 0 || device >= n)
    fail(ErrorKind::invalid_argument,
         "cuda device {} does not exist: {} CUDA device(s) visible (use 0..{})", device, n, n - 1);
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  if (previous_ != device) {
    const cudaError_t e = cudaSetDevice(device);
    if (e != cudaSuccess) fail_cuda("cuda: set device", e);
  } else {
    previous_ = -1;  // nothing to restore
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

void copy_to_host(void* host, const void* device_ptr, size_t bytes, void* stream) {
  if (bytes == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  cudaError_t e = cudaMemcpyAsync(host, device_ptr, bytes, cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) fail_cuda("cuda: copy weight values to host", e);
}

}  // namespace h3s::cuda
