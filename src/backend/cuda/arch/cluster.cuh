// Thread-block clusters (sm_90): a CTA's rank in its cluster, the
// cluster-wide barrier, and the distributed-shared-memory operations a CTA
// uses on its peer's shared memory: an address mapped into the peer and an
// mbarrier arrival there; and a TMA load multicast into several CTAs'
// shared memory (the async proxy: each receiver's wgmma reads it after its
// usual mbarrier wait).
// Bodies are guarded by __CUDA_ARCH_FEAT_SM90_ALL like the other sm_90a-only
// wrappers.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace h3s::cuda::arch {

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r = 0;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
#endif
  return r;
}

// Every thread of every CTA of the cluster arrives, then waits: what one
// CTA wrote before (its mbarrier inits, its last use of a peer's memory) is
// visible to the others after.
__device__ __forceinline__ void cluster_sync() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
#endif
}

// The shared::cluster address of `smem` (this CTA's shared::cta address) in
// CTA `rank` of the cluster: the same offset in the peer's shared memory.
__device__ __forceinline__ uint32_t map_to_rank(uint32_t smem, uint32_t rank) {
  uint32_t r = smem;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem), "r"(rank));
#else
  (void)rank;
#endif
  return r;
}

// One arrival on an mbarrier in another CTA of the cluster (a
// shared::cluster address from map_to_rank), with mbarrier.arrive's default
// release at CTA scope, as CUTLASS's ClusterBarrier::arrive: enough to order
// this thread's reads of a stage before the peer's producer reloads it. (A
// release at cluster scope compiles to MEMBAR.ALL.GPU before the arrive:
// measured to halve the kvi8s kernel's speed when taken twice a key tile.)
__device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_bar) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
#else
  (void)cluster_bar;
#endif
}

// tma_load_3d (tma.cuh) into every CTA of the cluster named by `cta_mask`
// (bit r: rank r): one read of the box from L2, landing at the same
// shared-memory offset `dst` in each and completing its bytes on each one's
// mbarrier at offset `bar`. Each receiver arms its own barrier
// (mbar_arrive_expect_tx) for the bytes; they may land before it does.
__device__ __forceinline__ void tma_load_3d_multicast(uint32_t dst, const CUtensorMap* map,
                                                      uint32_t bar, int32_t c0, int32_t c1,
                                                      int32_t c2, uint16_t cta_mask) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      ".multicast::cluster [%0], [%1, {%3, %4, %5}], [%2], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "h"(cta_mask)
      : "memory");
#else
  (void)dst, (void)map, (void)bar, (void)c0, (void)c1, (void)c2, (void)cta_mask;
#endif
}

}  // namespace h3s::cuda::arch
