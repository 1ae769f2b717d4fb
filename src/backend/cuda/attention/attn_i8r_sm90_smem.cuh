// Shared-memory addresses of the kvi8r attention, laid out by AttnI8rTraits:
// the exact kernel's Q and bf16 K/V rings (same names, so its consumer runs
// unchanged), then the int8 code rings, the per-key scales and the barriers.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/wgmma.cuh"

namespace h3s::cuda::attn {

template <class T>
struct AttnI8rSmem {
  uint32_t base;  // 1024-byte aligned shared address

  __device__ static AttnI8rSmem from(const void* raw) {
    const uint32_t a = arch::smem_u32(raw);
    return {(a + wgmma::kAtomBytes - 1) & ~uint32_t(wgmma::kAtomBytes - 1)};
  }
  __device__ uint32_t q() const { return base + T::kQOffset; }
  __device__ uint32_t k(int stage) const { return base + T::kKOffset + stage * T::kKvTileBytes; }
  __device__ uint32_t v(int stage) const { return base + T::kVOffset + stage * T::kKvTileBytes; }
  __device__ uint32_t k_codes(int s8) const { return base + T::kI8KOffset + s8 * T::kI8TileBytes; }
  __device__ uint32_t v_codes(int s8) const { return base + T::kI8VOffset + s8 * T::kI8TileBytes; }
  // fp16 per key of the bf16 stage's tile: K's scales, then V's.
  __device__ uint32_t k_scales(int stage) const {
    return base + T::kScaleOffset + stage * T::kScaleBytes;
  }
  __device__ uint32_t v_scales(int stage) const { return k_scales(stage) + T::kBlockN * 2; }

  __device__ uint32_t bar(int i) const { return base + T::kBarOffset + uint32_t(i) * 8; }
  __device__ uint32_t q_full() const { return bar(0); }
  __device__ uint32_t k_full(int stage) const { return bar(1 + stage); }
  __device__ uint32_t v_full(int stage) const { return bar(1 + T::kStages + stage); }
  __device__ uint32_t k_empty(int stage) const { return bar(1 + 2 * T::kStages + stage); }
  __device__ uint32_t v_empty(int stage) const { return bar(1 + 3 * T::kStages + stage); }
  __device__ uint32_t k_codes_full(int s8) const { return bar(1 + 4 * T::kStages + s8); }
  __device__ uint32_t v_codes_full(int s8) const {
    return bar(1 + 4 * T::kStages + T::kI8Stages + s8);
  }
  __device__ uint32_t k_codes_empty(int s8) const {
    return bar(1 + 4 * T::kStages + 2 * T::kI8Stages + s8);
  }
  __device__ uint32_t v_codes_empty(int s8) const {
    return bar(1 + 4 * T::kStages + 3 * T::kI8Stages + s8);
  }

  __device__ void init_barriers() const {
    arch::mbar_init(q_full(), 1);
    for (int s = 0; s < T::kStages; ++s) {
      arch::mbar_init(k_full(s), T::kConverterThreads);  // every converter, after its writes
      arch::mbar_init(v_full(s), T::kConverterThreads);
      arch::mbar_init(k_empty(s), T::kConsumerThreads);
      arch::mbar_init(v_empty(s), T::kConsumerThreads);
    }
    for (int s = 0; s < T::kI8Stages; ++s) {
      arch::mbar_init(k_codes_full(s), 1);  // the TMA thread's arrive.expect_tx
      arch::mbar_init(v_codes_full(s), 1);
      arch::mbar_init(k_codes_empty(s), T::kConverterThreads);
      arch::mbar_init(v_codes_empty(s), T::kConverterThreads);
    }
    arch::mbar_fence_init();
  }
};

}  // namespace h3s::cuda::attn
