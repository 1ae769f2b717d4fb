// Shared-memory addresses of the warp-specialised attention, laid out by
// AttnWsTraits: Q, the K ring, the V ring, then the mbarriers.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/wgmma.cuh"

namespace h3s::cuda::attn {

template <class T>
struct AttnWsSmem {
  uint32_t base;  // 1024-byte aligned shared address

  // Aligns the dynamic shared buffer (TMA's swizzle uses address bits).
  __device__ static AttnWsSmem from(const void* raw) {
    const uint32_t a = arch::smem_u32(raw);
    return {(a + wgmma::kAtomBytes - 1) & ~uint32_t(wgmma::kAtomBytes - 1)};
  }
  __device__ uint32_t q() const { return base + T::kQOffset; }
  __device__ uint32_t k(int stage) const { return base + T::kKOffset + stage * T::kKvTileBytes; }
  __device__ uint32_t v(int stage) const { return base + T::kVOffset + stage * T::kKvTileBytes; }
  __device__ uint32_t bar(int i) const { return base + T::kBarOffset + uint32_t(i) * 8; }
  __device__ uint32_t q_full() const { return bar(0); }
  __device__ uint32_t k_full(int stage) const { return bar(1 + stage); }
  __device__ uint32_t v_full(int stage) const { return bar(1 + T::kStages + stage); }
  __device__ uint32_t k_empty(int stage) const { return bar(1 + 2 * T::kStages + stage); }
  __device__ uint32_t v_empty(int stage) const { return bar(1 + 3 * T::kStages + stage); }

  // One thread: every barrier's arrival count, then the fence that shows
  // them to the TMA unit (the caller follows with __syncthreads).
  __device__ void init_barriers() const {
    init_ring_barriers();
    arch::mbar_fence_init();
  }
  // Q's and the K/V ring's barriers. A stage is full after kKvFullArrivals
  // arrivals: the producer's arrive.expect_tx (TMA), or every converter
  // thread's arrive after its writes (kvi8r).
  __device__ void init_ring_barriers() const {
    arch::mbar_init(q_full(), 1);
    for (int s = 0; s < T::kStages; ++s) {
      arch::mbar_init(k_full(s), T::kKvFullArrivals);
      arch::mbar_init(v_full(s), T::kKvFullArrivals);
      arch::mbar_init(k_empty(s), T::kConsumerThreads);  // every consumer thread releases
      arch::mbar_init(v_empty(s), T::kConsumerThreads);
    }
  }
};

}  // namespace h3s::cuda::attn
