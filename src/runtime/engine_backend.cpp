// EngineBackend: CPU or CUDA, and the per-call device/stream scope.
#include "runtime/engine_backend.hpp"

#include "core/error.hpp"
#ifdef H3S_HAVE_CUDA
#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/arch/device_arch_probe.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_device.hpp"
#include "backend/cuda/cuda_memory.hpp"
#endif

namespace h3s {

bool cuda_built() {
#ifdef H3S_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef H3S_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

int cuda_runtime_version() {
#ifdef H3S_HAVE_CUDA
  return cuda::runtime_version();
#else
  return 0;
#endif
}

int cuda_driver_version() {
#ifdef H3S_HAVE_CUDA
  return cuda::driver_version();
#else
  return 0;
#endif
}

CudaDeviceImage cuda_device_image(int device) {
#ifdef H3S_HAVE_CUDA
  const cuda::DeviceGuard on(device);
  CudaDeviceImage image;
  image.name = cuda::device_name(device);
  image.compute_capability = cuda::arch::device_compute_capability();
  image.binary_version = cuda::arch::image_binary_version();
  image.ptx_version = cuda::arch::image_ptx_version();
  return image;
#else
  (void)device;
  fail(ErrorKind::invalid_argument,
       "this h3stream was built without the CUDA backend: it has no GPU images");
#endif
}

void copy_cuda_to_host(int device, void* host, const void* device_ptr, size_t bytes,
                       uintptr_t stream) {
#ifdef H3S_HAVE_CUDA
  const cuda::DeviceGuard on(device);
  cuda::copy_to_host(host, device_ptr, bytes, reinterpret_cast<void*>(stream));
#else
  (void)device, (void)host, (void)device_ptr, (void)bytes, (void)stream;
  fail(ErrorKind::invalid_argument,
       "a CUDA tensor was given but this h3stream was built without the CUDA backend: pass CPU "
       "tensors, or rebuild with nvcc on PATH");
#endif
}

struct EngineBackend::CallScope::DeviceScope {
#ifdef H3S_HAVE_CUDA
  explicit DeviceScope(int device) : guard(device) {}
  cuda::DeviceGuard guard;
#endif
};

EngineBackend::CallScope::CallScope(EngineBackend& b, uintptr_t stream) {
#ifdef H3S_HAVE_CUDA
  if (b.device_kind() == Device::cuda) {
    device_ = std::make_unique<DeviceScope>(b.device_);
    b.backend_->use_stream(reinterpret_cast<void*>(stream));
  }
#else
  (void)b, (void)stream;
#endif
}

EngineBackend::CallScope::~CallScope() = default;

EngineBackend::EngineBackend(const std::string& name, int device, size_t budget_bytes, int threads)
    : name_(name), device_(device) {
  if (threads < 0)
    fail(ErrorKind::invalid_argument,
         "threads = {} is out of range: it must be >= 0 (0: every hardware thread)", threads);
  if (name == "cpu") {
    memory_ = std::make_unique<HostMemory>();
    arena_ = std::make_unique<Arena>(*memory_, budget_bytes);
    backend_ = make_cpu_backend(threads);
    return;
  }
  if (name == "cuda") {
#ifdef H3S_HAVE_CUDA
    const cuda::DeviceGuard on(device);
    // Plain cudaMalloc/cudaFree arena: the configuration measured on the H200.
    // A stream-ordered arena (CudaMemory(stream)) should remove cudaFree's
    // device-wide syncs between chunks, but its one device run (2026-11-30)
    // printed nothing within 90 s at 217k tokens: unverified, so not the
    // default. The backend starts on its own stream; each call moves it onto
    // the caller's (CallScope).
    memory_ = std::make_unique<cuda::CudaMemory>();
    arena_ = std::make_unique<Arena>(*memory_, budget_bytes);
    backend_ = make_cuda_backend(*arena_);
    return;
#else
    fail(ErrorKind::invalid_argument,
         "backend 'cuda': this h3stream was built without the CUDA backend (build it with nvcc "
         "on PATH and H3S_CUDA not OFF), or use the cpu backend");
#endif
  }
  fail(ErrorKind::invalid_argument, "backend '{}' is not valid: use 'cpu' or 'cuda'", name);
}

EngineBackend::~EngineBackend() {
#ifdef H3S_HAVE_CUDA
  // The CUDA backend frees its stream on the engine's device.
  std::unique_ptr<cuda::DeviceGuard> on;
  if (backend_ && backend_->device() == Device::cuda) {
    try {
      on = std::make_unique<cuda::DeviceGuard>(device_);
    } catch (const Error&) {  // the device vanished: free what can be freed
    }
  }
#endif
  backend_.reset();
  arena_.reset();
  memory_.reset();
}

}  // namespace h3s
