// The PTX version of the image the driver loaded for this build's kernels on
// the current device (device_arch_probe.cu; nvcc-compiled, fmt-free).
#pragma once

namespace h3s::cuda::arch {

// 90: the sm_90a image; 80: the sm_80 image, or the compute_80 PTX compiled
// for the device by the driver (newer GPUs, CUDA_FORCE_PTX_JIT=1); 0 when
// the driver cannot load this build's kernels on it.
int image_ptx_version();

// The machine code the driver runs those kernels as (major * 10 + minor): the
// image's own architecture (80 for the sm_80 image, also on an sm_86 device;
// 90 for sm_90a), or the device's when the driver compiled the PTX; 0 when
// none loads.
int image_binary_version();

}  // namespace h3s::cuda::arch
