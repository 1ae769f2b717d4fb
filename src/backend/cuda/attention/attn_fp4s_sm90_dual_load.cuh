// The kvfp4s producer as two warpgroups ("dual"): warpgroup 0 decodes every
// K tile, warpgroup 1 every V tile, each as AttnFp4sLoad decodes one (the
// same items, arithmetic and layout: the same bits). A profile of the
// one-warpgroup producer (H200, 2026-12-03) found the consumers waiting for K full more than
// on anything else and the decode issue-bound: one warp a scheduler decoding
// K then V. Two warpgroups give each scheduler two independent decode chains,
// and K's decode of tile t + 1 no longer waits for V's of tile t (kvi8r's
// dual producer the same way). Its loop is kvi8r's dual direct one
// (attn_i8r_sm90_dual_direct_load.cuh) over a code ring instead of
// registers: the two operands' decodes differ in every step between.
//
// Per operand X (K or V), its warpgroup's 128 threads, per key tile t:
//
//   thread i writes key i's X scales (and K's mean pairs, X's global: loaded
//   from global memory one tile ahead) to X's part of the stage's slot; the
//   warpgroup meets at its own named barrier; wait X codes[t] and the 16-bit
//   stage's release; decode; fence (wgmma reads through the async proxy);
//   arrive X full; release the codes; thread 0 of the warpgroup reloads the
//   code stage (Q too, once, in the K warpgroup).
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/tma.cuh"
#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_load.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_params.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_smem.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"

namespace h3s::cuda::attn {

template <class T>
struct AttnFp4sDualLoad {
  static_assert(T::kProducerWarpGroups == 2, "one producer warpgroup per operand");
  using One = AttnFp4sLoad<T>;

  template <bool kIsV>
  __device__ static void run_operand(const AttnFp4sParams& p, const AttnI8rSmem<T>& s,
                                     AttnWsTile tile, int n_tiles, int tid) {
    const int32_t head = int32_t(tile.head);
    const bool issuer = tid == 0;
    const ConvertPlan items = convert_plan<T>(tid);
    if (issuer) {
      if constexpr (!kIsV) {
        arch::tma_prefetch_desc(&p.base.q_map);
        issue_q(p.base, s, tile);
      }
      arch::tma_prefetch_desc(kIsV ? &p.base.v_map : &p.base.k_map);
      for (int t = 0; t < T::kI8Stages && t < n_tiles; ++t)
        issue_code_tile(p.base, s, kIsV, head, t);
    }
    auto next = One::template fetch<kIsV>(p, head, 0, n_tiles, tid);
    for (int t = 0; t < n_tiles; ++t) {
      const int s8 = t % T::kI8Stages, stage = t % T::kStages;
      const uint32_t parity8 = uint32_t((t / T::kI8Stages) & 1);
      const uint32_t free_parity = uint32_t((t / T::kStages) & 1) ^ 1u;
      const auto now = next;
      next = One::template fetch<kIsV>(p, head, t + 1, n_tiles, tid);
      // The slots alternate with the stage, and each warpgroup writes and
      // reads only its operand's part: a thread writes tile t + 1's only
      // after this barrier of tile t, which every thread of its warpgroup
      // reaches after decoding tile t - 1.
      const uint32_t slot = s.k_scales(stage);
      One::template put<kIsV>(slot, now, tid);
      arch::named_bar_sync(T::kScaleBarrier + (kIsV ? 1 : 0), T::kConverterThreads);

      arch::mbar_wait(kIsV ? s.v_codes_full(s8) : s.k_codes_full(s8), parity8);
      arch::mbar_wait(kIsV ? s.v_empty(stage) : s.k_empty(stage), free_parity);
      One::template decode<!kIsV>(kIsV ? s.v_codes(s8) : s.k_codes(s8),
                                  kIsV ? s.v(stage) : s.k(stage), slot, items);
      wgmma::fence_proxy_async_smem();
      arch::mbar_arrive(kIsV ? s.v_full(stage) : s.k_full(stage));
      arch::mbar_arrive(kIsV ? s.v_codes_empty(s8) : s.k_codes_empty(s8));
      if (issuer && t + T::kI8Stages < n_tiles)
        issue_code_tile(p.base, s, kIsV, head, t + T::kI8Stages);
    }
  }

  // thread_index: 0-255 across the two producer warpgroups (K, then V).
  __device__ static void run(const AttnFp4sParams& p, const AttnI8rSmem<T>& s, AttnWsTile tile,
                             int n_tiles, int thread_index) {
    if (thread_index < arch::kWarpGroupThreads)
      run_operand<false>(p, s, tile, n_tiles, thread_index);
    else
      run_operand<true>(p, s, tile, n_tiles, thread_index - arch::kWarpGroupThreads);
  }
};

}  // namespace h3s::cuda::attn
