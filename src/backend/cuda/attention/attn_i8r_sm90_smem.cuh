// Shared-memory addresses of the converting tiers' attention, laid out by
// AttnI8rTraits (kvi8r) or AttnFp4sTraits (kvfp4s): the exact kernel's layout
// (AttnWsSmem: Q, the 16-bit K/V rings and their barriers at the same places,
// so its consumer runs unchanged), then the code rings (kvfp4s'; kvi8r has
// none), the per-key scales and the code rings' barriers.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/attention/attn_ws_sm90_smem.cuh"

namespace h3s::cuda::attn {

template <class T>
struct AttnI8rSmem : AttnWsSmem<T> {
  using Base = AttnWsSmem<T>;
  using Base::bar;

  __device__ static AttnI8rSmem from(const void* raw) { return {Base::from(raw)}; }

  __device__ uint32_t k_codes(int s8) const {
    return this->base + T::kI8KOffset + s8 * T::kI8TileBytes;
  }
  __device__ uint32_t v_codes(int s8) const {
    return this->base + T::kI8VOffset + s8 * T::kI8TileBytes;
  }
  // Per key of the 16-bit stage's tile (kScaleItemBytes each): K's scales, then V's.
  __device__ uint32_t k_scales(int stage) const {
    return this->base + T::kScaleOffset + stage * T::kScaleBytes;
  }
  __device__ uint32_t v_scales(int stage) const {
    return k_scales(stage) + T::kBlockN * T::kScaleItemBytes;
  }

  // The code rings' barriers follow the exact layout's 1 + 4 kStages.
  __device__ uint32_t k_codes_full(int s8) const { return bar(kCodeBar + s8); }
  __device__ uint32_t v_codes_full(int s8) const { return bar(kCodeBar + T::kI8Stages + s8); }
  __device__ uint32_t k_codes_empty(int s8) const { return bar(kCodeBar + 2 * T::kI8Stages + s8); }
  __device__ uint32_t v_codes_empty(int s8) const { return bar(kCodeBar + 3 * T::kI8Stages + s8); }

  __device__ void init_barriers() const {
    this->init_ring_barriers();  // K/V full: every converter thread, after its writes
    for (int s = 0; s < T::kI8Stages; ++s) {
      arch::mbar_init(k_codes_full(s), 1);  // the TMA thread's arrive.expect_tx
      arch::mbar_init(v_codes_full(s), 1);
      arch::mbar_init(k_codes_empty(s), T::kConverterThreads);
      arch::mbar_init(v_codes_empty(s), T::kConverterThreads);
    }
    arch::mbar_fence_init();
  }

 private:
  static constexpr int kCodeBar = 1 + 4 * T::kStages;
};

}  // namespace h3s::cuda::attn
