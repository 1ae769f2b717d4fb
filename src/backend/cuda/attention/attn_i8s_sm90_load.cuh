// The producer of the kvi8s attention: one thread issues every TMA load.
// Q (bf16, kBlockM rows, both 64-dim halves) lands once on q_full; then per
// key tile, into the next ring stage once both consumers released it: the
// K codes and the tile header's K rows on k_full, the V^T codes and the
// header's V rows on v_full.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/tma.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_params.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_smem.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"
#include "kvfmt/kvi8s.hpp"

namespace h3s::cuda::attn {

template <class T>
struct AttnI8sLoad {
  __device__ static void run(const AttnI8sParams& p, const AttnI8sSmem<T>& s, AttnWsTile tile,
                             int n_tiles) {
    arch::tma_prefetch_desc(&p.base.q_map);
    arch::tma_prefetch_desc(&p.base.k_map);
    arch::tma_prefetch_desc(&p.base.v_map);
    arch::tma_prefetch_desc(&p.header_k_map);
    arch::tma_prefetch_desc(&p.header_v_map);
    const int32_t head = int32_t(tile.head);
    arch::mbar_arrive_expect_tx(s.q_full(), T::kQBytes);
#pragma unroll
    for (int h = 0; h < T::kHalves; ++h)
      arch::tma_load_3d(s.q() + uint32_t(h) * T::kQHalfBytes, &p.base.q_map, s.q_full(),
                        h * T::kHalfDims, head, int32_t(tile.row0));
    for (int t = 0; t < n_tiles; ++t) {
      const int stage = t % T::kStages;
      const uint32_t free_parity = uint32_t((t / T::kStages) & 1) ^ 1u;
      const int64_t key0 = p.base.key_begin + int64_t(t) * T::kBlockN;
      // The tile's header record: (tile, head) in the store's order.
      const int32_t record = int32_t((key0 / T::kBlockN) * p.base.heads + head);
      arch::mbar_wait(s.k_empty(stage), free_parity);
      arch::mbar_arrive_expect_tx(s.k_full(stage), T::kKTxBytes);
      arch::tma_load_3d(s.k(stage), &p.base.k_map, s.k_full(stage), 0, head, int32_t(key0));
      arch::tma_load_3d(s.k_header(stage), &p.header_k_map, s.k_full(stage), 0, 0, record);
      arch::mbar_wait(s.v_empty(stage), free_parity);
      arch::mbar_arrive_expect_tx(s.v_full(stage), T::kVTxBytes);
      arch::tma_load_3d(s.v(stage), &p.base.v_map, s.v_full(stage), int32_t(key0), 0, head);
      arch::tma_load_3d(s.v_header(stage), &p.header_v_map, s.v_full(stage), 0, kvi8s::kRowVScale,
                        record);
    }
  }
};

}  // namespace h3s::cuda::attn
