// image_ptx_version(), image_binary_version(): one empty kernel, compiled into
// every image of the backend like the others, whose attributes name the image
// loaded.
#include <cuda_runtime.h>

#include "backend/cuda/arch/device_arch_probe.hpp"

namespace h3s::cuda::arch {

namespace {
__global__ void image_probe() {}  // never launched

cudaFuncAttributes probe_attributes() {
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, image_probe) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: no image for this device
    return cudaFuncAttributes{};
  }
  return a;
}
}  // namespace

int image_ptx_version() {
  return probe_attributes().ptxVersion;
}

int image_binary_version() {
  return probe_attributes().binaryVersion;
}

}  // namespace h3s::cuda::arch
