// Shared-memory addresses of the kvi8s attention, laid out by AttnI8sTraits:
// Q (bf16), Q's int8 codes per consumer, the K ring (codes + header K rows),
// the V ring (V^T codes, the row sums' ones rows, V scales), Q's scales, then
// the mbarriers.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/wgmma.cuh"

namespace h3s::cuda::attn {

template <class T>
struct AttnI8sSmem {
  uint32_t base;  // 1024-byte aligned shared address

  __device__ static AttnI8sSmem from(const void* raw) {
    const uint32_t a = arch::smem_u32(raw);
    return {(a + wgmma::kAtomBytes - 1) & ~uint32_t(wgmma::kAtomBytes - 1)};
  }
  __device__ uint32_t q() const { return base + T::kQOffset; }
  __device__ uint32_t q8(int consumer) const {
    return base + T::kQ8Offset + uint32_t(consumer) * T::kQ8GroupBytes;
  }
  __device__ uint32_t k(int stage) const { return base + T::kKOffset + stage * T::kKStageBytes; }
  __device__ uint32_t v(int stage) const { return base + T::kVOffset + stage * T::kVStageBytes; }
  // The header rows of a stage: K's after its codes, V's after its codes
  // and the ones rows.
  __device__ uint32_t k_header(int stage) const { return k(stage) + T::kKCodeBytes; }
  __device__ uint32_t v_ones(int stage) const { return v(stage) + T::kVCodeBytes; }
  __device__ uint32_t v_header(int stage) const { return v_ones(stage) + T::kVOnesBytes; }
  // Every stage's ones rows (e4m3 1.0), by all the CTA's threads before the
  // barrier that follows, visible to the tensor cores' async proxy.
  __device__ void write_ones() const {
    constexpr uint32_t kE4m3Ones = 0x38383838u;
    constexpr uint32_t kWords = T::kVOnesBytes / 16;
    for (uint32_t i = threadIdx.x; i < T::kStages * kWords; i += blockDim.x)
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};" ::"r"(v_ones(int(i / kWords)) +
                                                                    (i % kWords) * 16),
                   "r"(kE4m3Ones)
                   : "memory");
    wgmma::fence_proxy_async_smem();
  }
  __device__ uint32_t q_scale(int row) const { return base + T::kQScaleOffset + uint32_t(row) * 4; }
  __device__ uint32_t bar(int i) const { return base + T::kBarOffset + uint32_t(i) * 8; }
  __device__ uint32_t q_full() const { return bar(0); }
  __device__ uint32_t k_full(int stage) const { return bar(1 + stage); }
  __device__ uint32_t v_full(int stage) const { return bar(1 + T::kStages + stage); }
  __device__ uint32_t k_empty(int stage) const { return bar(1 + 2 * T::kStages + stage); }
  __device__ uint32_t v_empty(int stage) const { return bar(1 + 3 * T::kStages + stage); }

  __device__ void init_barriers() const {
    arch::mbar_init(q_full(), 1);
    for (int s = 0; s < T::kStages; ++s) {
      arch::mbar_init(k_full(s), 1);  // the producer's arrive.expect_tx
      arch::mbar_init(v_full(s), 1);
      // Every consumer thread releases.
      arch::mbar_init(k_empty(s), T::kEmptyArrivals);
      arch::mbar_init(v_empty(s), T::kEmptyArrivals);
    }
    arch::mbar_fence_init();
  }
};

}  // namespace h3s::cuda::attn
