// image_ptx_version(): one empty kernel, compiled into every image of the
// backend like the others, whose attributes name the image loaded.
#include <cuda_runtime.h>

#include "backend/cuda/arch/device_arch_probe.hpp"

namespace h3s::cuda::arch {

namespace {
__global__ void image_probe() {}  // never launched
}  // namespace

int image_ptx_version() {
  cudaFuncAttributes a{};
  if (cudaFuncGetAttributes(&a, image_probe) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: no image for this device
    return 0;
  }
  return a.ptxVersion;
}

}  // namespace h3s::cuda::arch
