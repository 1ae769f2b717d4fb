// Warpgroup-level controls of sm_90a: register re-allocation between
// warpgroups (setmaxnreg) and named CTA barriers (bar.sync / bar.arrive with
// a thread count), which the warp-specialised kernels use to hand the tensor
// cores from one consumer warpgroup to the other.
#pragma once

#include <cstdint>

namespace h3s::cuda::arch {

inline constexpr int kWarpGroupThreads = 128;
// Registers per SM (64 K of 32 bits): the budget setmaxnreg redistributes.
inline constexpr int kSmRegisters = 64 * 1024;

// Every thread of the warpgroup executes these (.sync.aligned); the count is
// a multiple of 8 in [24, 256].
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256);
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
#endif
}

// Named barrier `id` (1..15; 0 is __syncthreads) completes when `threads`
// threads have arrived; sync waits for completion, arrive does not.
__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// The warpgroup index of this thread, uniform across the warp (so the
// compiler can keep role branches warp-uniform).
__device__ __forceinline__ int warpgroup_index() {
  return __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpGroupThreads, 0);
}

}  // namespace h3s::cuda::arch
