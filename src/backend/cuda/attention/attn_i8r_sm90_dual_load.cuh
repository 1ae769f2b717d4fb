// The kvi8r producer as two warpgroups ("dual"): warpgroup 0 converts every
// K tile, warpgroup 1 every V tile, each as AttnI8rLoad converts one (the
// same items, arithmetic and layout: the same bits). A profile of the
// one-warpgroup producer (H200, 2026-12-04) found it the bottleneck and latency-bound: one
// warp per scheduler, its chain of code loads, conversions, stores, fences
// and barrier waits exposed. Two warpgroups give each scheduler two
// independent chains, and K's conversion of tile t + 1 no longer waits for
// V's of tile t.
//
// Per operand X (K or V), its warpgroup's 128 threads, per key tile t:
//
//   thread i writes key i's X scale (loaded from global memory one tile
//   ahead) to the stage's slot; the warpgroup meets at its own named
//   barrier; wait X codes[t] and the 16-bit stage's release; dequantise;
//   fence (wgmma reads through the async proxy); arrive X full; release the
//   codes; thread 0 of the warpgroup reloads the code stage (Q too, once, in
//   the K warpgroup).
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/tma.cuh"
#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_load.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_params.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_smem.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"

namespace h3s::cuda::attn {

template <class T>
struct AttnI8rDualLoad {
  static_assert(T::kDualProducer && T::kProducerWarpGroups == 2,
                "one producer warpgroup per operand");

  // One operand's rings: its code stages, 16-bit stages, scale slots, barriers and map.
  struct Operand {
    bool is_v;
    __device__ uint32_t codes(const AttnI8rSmem<T>& s, int s8) const {
      return is_v ? s.v_codes(s8) : s.k_codes(s8);
    }
    __device__ uint32_t codes_full(const AttnI8rSmem<T>& s, int s8) const {
      return is_v ? s.v_codes_full(s8) : s.k_codes_full(s8);
    }
    __device__ uint32_t codes_empty(const AttnI8rSmem<T>& s, int s8) const {
      return is_v ? s.v_codes_empty(s8) : s.k_codes_empty(s8);
    }
    __device__ uint32_t tile(const AttnI8rSmem<T>& s, int stage) const {
      return is_v ? s.v(stage) : s.k(stage);
    }
    __device__ uint32_t full(const AttnI8rSmem<T>& s, int stage) const {
      return is_v ? s.v_full(stage) : s.k_full(stage);
    }
    __device__ uint32_t empty(const AttnI8rSmem<T>& s, int stage) const {
      return is_v ? s.v_empty(stage) : s.k_empty(stage);
    }
    __device__ uint32_t scales(const AttnI8rSmem<T>& s, int stage) const {
      return is_v ? s.v_scales(stage) : s.k_scales(stage);
    }
  };

  // thread_index: 0-255 across the two producer warpgroups.
  __device__ static void run(const AttnI8rParams& p, const AttnI8rSmem<T>& s, AttnWsTile tile,
                             int n_tiles, int thread_index) {
    const Operand x{thread_index >= arch::kWarpGroupThreads};
    const int tid = thread_index % arch::kWarpGroupThreads;
    const int32_t head = int32_t(tile.head);
    const bool issuer = tid == 0;
    const ConvertPlan items = convert_plan<T>(tid);
    if (issuer) {
      if (!x.is_v) {
        arch::tma_prefetch_desc(&p.base.q_map);
        issue_q(p.base, s, tile);
      }
      arch::tma_prefetch_desc(x.is_v ? &p.base.v_map : &p.base.k_map);
      for (int t = 0; t < T::kI8Stages && t < n_tiles; ++t)
        issue_code_tile(p.base, s, x.is_v, head, t);
    }
    const uint16_t* scale = x.is_v ? p.v_scale : p.k_scale;
    // This thread's key's scale of tile t (0 past the keys: masked).
    auto scale_of = [&](int t) {
      return AttnI8rLoad<T>::key_scale(p, scale, tile, n_tiles, t, tid);
    };
    const int scale_barrier = T::kScaleBarrier + (x.is_v ? 1 : 0);
    uint16_t sc = scale_of(0);
    for (int t = 0; t < n_tiles; ++t) {
      const int s8 = t % T::kI8Stages, stage = t % T::kStages;
      const uint32_t parity8 = uint32_t((t / T::kI8Stages) & 1);
      const uint32_t free_parity = uint32_t((t / T::kStages) & 1) ^ 1u;
      // The slots alternate with the stage: a thread writes tile t + 1's
      // only after this barrier of tile t, which every thread of the
      // warpgroup reaches after reading tile t - 1's.
      AttnI8rLoad<T>::store_scale(x.scales(s, stage), tid, sc);
      sc = scale_of(t + 1);
      arch::named_bar_sync(scale_barrier, T::kConverterThreads);

      arch::mbar_wait(x.codes_full(s, s8), parity8);
      arch::mbar_wait(x.empty(s, stage), free_parity);
      AttnI8rLoad<T>::convert(x.codes(s, s8), x.tile(s, stage), x.scales(s, stage), items);
      wgmma::fence_proxy_async_smem();
      arch::mbar_arrive(x.full(s, stage));
      arch::mbar_arrive(x.codes_empty(s, s8));
      if (issuer && t + T::kI8Stages < n_tiles)
        issue_code_tile(p.base, s, x.is_v, head, t + T::kI8Stages);
    }
  }
};

}  // namespace h3s::cuda::attn
