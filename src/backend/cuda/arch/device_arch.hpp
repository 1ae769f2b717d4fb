// What the current device runs of this build's machine code. The CUDA
// backend carries an sm_90a image (the Hopper kernels: wgmma, TMA,
// setmaxnreg, and the mma.sync ones), an sm_80 image (the mma.sync kernels:
// Ampere and Ada, e.g. RTX 30 and 40 series, A100, L4) and compute_80 PTX the
// driver compiles for newer GPUs (Blackwell); kvi8s' mma.sync kernel also
// has sm_89 and sm_120 images and compute_89 PTX (fp8 mma.sync). Every
// dispatcher asks here which kernels it may launch.
#pragma once

namespace h3s::cuda::arch {

// The oldest compute capability the backend runs on (major * 10 + minor).
inline constexpr int kMinComputeCapability = 80;

// The current device's compute capability, major * 10 + minor.
int device_compute_capability();

// Whether the Hopper kernels run here: an sm_90 device running the sm_90a
// image. False elsewhere, and on an H100/H200 running the compute_80 PTX
// (CUDA_FORCE_PTX_JIT=1: how the device suite checks the sm_80 code paths
// on Hopper).
bool hopper_kernels();

// The most dynamic shared memory one block may opt in to on the current
// device (227 KiB on Hopper, 163 KiB on A100, 99 KiB on Ampere/Ada cards).
int max_dynamic_smem_bytes();

// The shared memory of one SM on the current device, all its blocks together
// (228 KiB on Hopper, 164 KiB on A100, 100 KiB on Ampere/Ada/Blackwell cards).
int smem_per_sm_bytes();

// Throws, naming the device and the requirement, unless the current device
// is sm_80 or newer.
void expect_supported_device();

}  // namespace h3s::cuda::arch
