// Tensor Memory Accelerator (TMA) bulk-tensor loads, sm_90a: one thread asks
// for a whole box of a tensor described by a CUtensorMap (tma_desc.hpp builds
// them on the host); the bytes land in shared memory, swizzled as the map
// says, and complete a transaction count on an mbarrier (mbarrier.cuh).
// Boxes that reach past the tensor's extent are zero-filled, and the count
// is always the whole box. Coordinates are 32-bit signed per dimension, the
// addressing behind them 64-bit: a 300,001-token sequence is one extent.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace h3s::cuda::arch {

// Pulls the descriptor into the TMA unit's cache ahead of the first copy.
__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap* map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#else
  (void)map;
#endif
}

// Loads the box at (c0, c1, c2) of a rank-3 map into shared memory at dst
// (1024-byte aligned for the 128-byte swizzle), completing on barrier bar.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int32_t c0, int32_t c1, int32_t c2) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
#else
  (void)dst, (void)map, (void)bar, (void)c0, (void)c1, (void)c2;
#endif
}

}  // namespace h3s::cuda::arch
