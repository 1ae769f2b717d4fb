// The backend of one engine (the CLI's forward, BlockEngine): its memory,
// arena and ops, plus the per-call switch to the engine's GPU and the
// caller's CUDA stream. The only place above the backends that knows whether
// the CUDA backend was built.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace h3s {

// True when this build has the CUDA backend (a GPU may still be missing).
bool cuda_built();
// Visible CUDA devices; 0 without the CUDA backend, a driver or a device.
int cuda_device_count();
// The CUDA runtime linked in (1000 * major + 10 * minor, e.g. 13000); 0
// without the CUDA backend.
int cuda_runtime_version();
// The newest CUDA version the installed driver supports, in the same form; 0
// without the CUDA backend or a driver.
int cuda_driver_version();

// Which of this build's GPU images a device runs (the Python build_info()).
struct CudaDeviceImage {
  std::string name;
  int compute_capability = 0;  // major * 10 + minor
  // The backend's kernels as the driver loaded them: the machine code's
  // architecture and the PTX version it was compiled from. Equal: machine
  // code this build ships (sm_90a: 90, 90); binary above ptx: the driver
  // compiled the PTX for this device; 0: no image loads.
  int binary_version = 0;
  int ptx_version = 0;
};
// Throws Error(invalid_argument) without the CUDA backend or the device. Creates
// the device's CUDA context (asking the driver loads the kernels).
CudaDeviceImage cuda_device_image(int device);
// Device -> host copy on `device` in the order of the caller's `stream` (a
// cudaStream_t as an integer, 0: the legacy default stream), waited for; throws
// without the CUDA backend.
void copy_cuda_to_host(int device, void* host, const void* device_ptr, size_t bytes,
                       uintptr_t stream);

class EngineBackend {
 public:
  // name: "cpu" or "cuda". budget_bytes: the activation arena's budget (0 =
  // unlimited). threads: CPU worker threads (<= 0: every hardware thread).
  // Throws Error(invalid_argument) naming a bad name or device and the fix.
  EngineBackend(const std::string& name, int device, size_t budget_bytes, int threads);
  ~EngineBackend();
  EngineBackend(const EngineBackend&) = delete;
  EngineBackend& operator=(const EngineBackend&) = delete;

  const std::string& name() const { return name_; }
  Device device_kind() const { return backend_->device(); }
  int device() const { return device_; }
  Backend& ops() { return *backend_; }
  Arena& arena() { return *arena_; }
  const Arena& arena() const { return *arena_; }

  // While alive: the engine's GPU is current and every op goes to `stream`
  // (a cudaStream_t as an integer; 0 = the legacy default stream). A no-op on
  // the CPU backend. Nothing here synchronises the device.
  class CallScope {
   public:
    CallScope(EngineBackend& b, uintptr_t stream);
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;

   private:
    struct DeviceScope;
    std::unique_ptr<DeviceScope> device_;
  };

 private:
  std::string name_;
  int device_ = 0;
  std::unique_ptr<MemoryResource> memory_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<Backend> backend_;
};

}  // namespace h3s
