// Which GPU the CUDA backend works on, for hosts (the Python module) whose
// framework may have another device current.
#pragma once

#include <cstddef>
#include <string>

namespace h3s::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no device
// (never throws: "is there a GPU" is a question, not an error).
int device_count();

// The CUDA runtime linked in, as CUDART_VERSION: 1000 * major + 10 * minor.
int runtime_version();

// The newest CUDA version the installed driver supports, in the same form; 0
// without a driver.
int driver_version();

// Device `device`'s name ("?" when it cannot be read).
std::string device_name(int device);

// Makes `device` the current device for this host thread while the guard
// lives and restores the previous one after. Throws Error(invalid_argument)
// naming the device and the count when it does not exist.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Device -> host copy in the order of `stream` (the caller's: the bytes may
// still be in flight there, e.g. a host framework's offload copy), waited for.
void copy_to_host(void* host, const void* device_ptr, size_t bytes, void* stream);

}  // namespace h3s::cuda
