// The producer of the warp-specialised attention: one thread issues every
// TMA load of the CTA. Q (kBlockM rows, both 64-dim halves) lands once on
// q_full; then K and V tiles in key order, each into the next ring stage once
// both consumers have released it (k_empty / v_empty), completing on k_full /
// v_full with the box's byte count. K and V have separate barriers so QK^T
// starts before V has landed.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/tma.cuh"
#include "backend/cuda/attention/attn_ws_sm90_params.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"
#include "backend/cuda/attention/attn_ws_sm90_smem.cuh"

namespace h3s::cuda::attn {

template <class T>
struct AttnWsLoad {
  __device__ static void run(const AttnWsParams& p, const AttnWsSmem<T>& s, AttnWsTile tile,
                             int n_tiles) {
    arch::tma_prefetch_desc(&p.q_map);
    arch::tma_prefetch_desc(&p.k_map);
    arch::tma_prefetch_desc(&p.v_map);
    const int32_t head = int32_t(tile.head);
    arch::mbar_arrive_expect_tx(s.q_full(), T::kQBytes);
#pragma unroll
    for (int h = 0; h < T::kHalves; ++h)
      arch::tma_load_3d(s.q() + uint32_t(h) * T::kQHalfBytes, &p.q_map, s.q_full(),
                        h * T::kHalfDims, head, int32_t(tile.row0));
    for (int t = 0; t < n_tiles; ++t) {
      const int stage = t % T::kStages;
      const uint32_t free_parity = uint32_t((t / T::kStages) & 1) ^ 1u;
      const int32_t key0 = int32_t(p.key_begin + int64_t(t) * T::kBlockN);
      arch::mbar_wait(s.k_empty(stage), free_parity);
      arch::mbar_arrive_expect_tx(s.k_full(stage), T::kKvTileBytes);
#pragma unroll
      for (int h = 0; h < T::kHalves; ++h)
        arch::tma_load_3d(s.k(stage) + uint32_t(h) * T::kKvHalfBytes, &p.k_map, s.k_full(stage),
                          h * T::kHalfDims, head, key0);
      arch::mbar_wait(s.v_empty(stage), free_parity);
      arch::mbar_arrive_expect_tx(s.v_full(stage), T::kKvTileBytes);
#pragma unroll
      for (int h = 0; h < T::kHalves; ++h)
        arch::tma_load_3d(s.v(stage) + uint32_t(h) * T::kKvHalfBytes, &p.v_map, s.v_full(stage),
                          h * T::kHalfDims, head, key0);
    }
  }
};

}  // namespace h3s::cuda::attn
