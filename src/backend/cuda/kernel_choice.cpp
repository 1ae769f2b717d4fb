// kernel_choice.hpp's device questions (host code).
#include "backend/cuda/kernel_choice.hpp"

#include "backend/cuda/arch/device_arch.hpp"
#include "core/error.hpp"

namespace h3s::cuda {

namespace {
constexpr int kFp8MmaComputeCapability = 89;  // mma.sync on e4m3: Ada and newer
}  // namespace

Arch kernel_arch() {
  if (arch::hopper_kernels()) return Arch::sm90;
  return arch::device_compute_capability() >= kFp8MmaComputeCapability ? Arch::sm89 : Arch::sm80;
}

void check_request(AttnKernel attn, Arch arch) {
  if (!request_runs(attn, arch))
    fail(ErrorKind::invalid_argument,
         "attn_kernel sm90: the Hopper kernels need an sm_90 GPU (H100, H200) running the "
         "sm_90a image; use default or sm80 here");
}

}  // namespace h3s::cuda
