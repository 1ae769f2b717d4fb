// Shared-memory mbarriers (PTX ISA 7.8+, sm_90): the producer/consumer
// handshake of the TMA pipelines. A barrier completes a phase when its
// expected arrivals have arrived and, for TMA, its expected transaction bytes
// have landed; waiters name the phase parity they wait for. Bodies are
// guarded by __CUDA_ARCH_FEAT_SM90_ALL like the other sm_90a-only wrappers, so
// the portable compute_90 PTX still builds (its launchers never select them).
#pragma once

#include <cstdint>

namespace h3s::cuda::arch {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return uint32_t(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
#else
  (void)bar, (void)arrivals;
#endif
}

// Makes the initialised barriers visible to the async proxy (TMA) and to the
// other threads; follow with a CTA barrier.
__device__ __forceinline__ void mbar_fence_init() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}

// One arrival that also announces `bytes` of TMA transactions for this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#else
  (void)bar, (void)bytes;
#endif
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#else
  (void)bar;
#endif
}

// Blocks until the phase with the given parity has completed. A fresh
// barrier is in phase 0, so waiting for parity 1 returns at once: the
// producer's first pass over an "empty" ring does not wait.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
#else
  (void)bar, (void)parity;
#endif
}

}  // namespace h3s::cuda::arch
