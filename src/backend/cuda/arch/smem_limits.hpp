// The dynamic shared memory one block may opt in to, per architecture: what
// the kernels' static_asserts check their requests against (a kernel that
// asks for more fails to launch there). scripts/kernel-resources.sh checks the
// static shared memory, registers and spills of the same kernels per image.
#pragma once

namespace h3s::cuda::arch {

// sm_86/89/120's opt-in maximum per block is 99 KiB = 101,376 bytes (sm_80 has
// 163 KiB): the bound of every kernel that runs on RTX 30/40/50 cards, L4, L40.
inline constexpr int kSmemOptInSm86 = 99 * 1024;
// sm_80's (A100): only kernels chosen by arch::max_dynamic_smem_bytes() at run
// time may ask for more than kSmemOptInSm86.
inline constexpr int kSmemOptInSm80 = 163 * 1024;

}  // namespace h3s::cuda::arch
