// The kvi8r producer ("dual direct"): two warpgroups, one converting every
// K tile and one every V tile, without a code ring: each converter thread
// loads its own codes from global memory (L2) into registers, a tile ahead,
// so no code byte crosses shared memory (a ring's TMA write and code loads:
// 64 KiB a tile). The ring's 64 KiB could hold a third 16-bit K/V stage; two
// stages measured faster (1.13-1.15x the exact kernel against 1.13-1.17x on
// an H200), and both beat the code ring (1.18-1.21x, the variants in
// bench/results/experiments/removed_kvi8r_variants.diff) by clock, not
// cycles: without the ring's shared traffic the kernel draws less power
// under the H200's cap.
// Since then the store's scales are head-major (a warp's 32 scale
// loads read 2 sectors, not 32) and its codes biased (no xor): 1.09-1.10x.
// Scales by TMA instead (no load, slot store or named barrier) lost 10%, by
// clock (bench/results/experiments/kvi8r_tma_scales_2026-12-04.patch).
//
// Per operand X, its warpgroup's 128 threads, per key tile t, with tile t's
// X codes and scale already in registers:
//
//   wait the stage's release; write key i's scale to the stage's slot; meet
//   at the warpgroup's named barrier; dequantise (AttnI8rLoad's arithmetic
//   and layout: the same bits); fence; arrive X full; then load tile t + 1's
//   codes and scale.
//
// The loads follow the arrive: a profile of the code-ring producer found a converter's
// fence and arrive waiting for its global loads in flight, and the one-
// warpgroup direct producer losing to exactly that. Here the loads land
// while the warpgroup waits for the next stage's release, which the dual
// producer's profile found it doing for 21% of its time.
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

namespace i8r {

// 8 codes from global memory, through L2 only (every CTA of a head streams
// the same codes once: L1 would only evict).
__device__ __forceinline__ uint2 ldg_codes8(const uint8_t* p) {
  uint2 w;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];"
               : "=r"(w.x), "=r"(w.y)
               : "l"(p));
  return w;
}

}  // namespace i8r

template <class T>
struct AttnI8rDualDirectLoad {
  static_assert(T::kProducerWarpGroups == 2 && T::kI8Stages == 0,
                "two producer warpgroups, no code ring");
  // 8-code items (16-code items measured slower, then spilled with the biased
  // codes: bench/results/LOG.md, 2026-12-04).
  static_assert(T::kItemCodes == 8, "one 8-byte load an item");
  using Word = uint2;

  // One thread's codes of one K or V tile: an item a pass (32 registers).
  struct Codes {
    Word w[T::kPasses];
  };

  __device__ static Word load_item(const uint8_t* at) { return i8r::ldg_codes8(at); }

  // Issues the loads of a tile's items (pass 0's item at `first`, its key
  // `rows_left` before key_end): zeros for rows past key_end (their scales
  // are 0 and the consumers mask them). The address walks a pass at a time.
  __device__ static void load(Codes& c, const uint8_t* first, int64_t rows_left,
                              int64_t pass_stride) {
    const uint8_t* at = first;
#pragma unroll
    for (int i = 0; i < T::kPasses; ++i, at += pass_stride)
      c.w[i] = int64_t(i) * T::kRowsPerPass < rows_left ? load_item(at) : Word{};
  }

  // Codes -> one 16-bit tile, scales read kBatch passes at a time.
  __device__ static void convert(const Codes& c, uint32_t tile, uint32_t scales,
                                 const ConvertPlan& plan) {
    constexpr uint32_t kPassScaleBytes = T::kRowsPerPass * T::kScaleItemBytes;
    const uint32_t dst = tile + plan.dst0, sc = scales + plan.scale;
#pragma unroll
    for (int i = 0; i < T::kPasses; i += T::kBatch) {
      uint32_t s2[T::kBatch];
#pragma unroll
      for (int b = 0; b < T::kBatch; ++b)
        s2[b] = i8r::ld_shared_scale2(sc + (i + b) * kPassScaleBytes);
#pragma unroll
      for (int b = 0; b < T::kBatch; ++b)
        AttnI8rLoad<T>::store_item(dst + (i + b) * T::kPassBytes, c.w[i + b], s2[b]);
    }
  }

  // thread_index: 0-255 across the two producer warpgroups (K, then V).
  __device__ static void run(const AttnI8rParams& p, const AttnI8rSmem<T>& s, AttnWsTile tile,
                             int n_tiles, int thread_index) {
    const bool is_v = thread_index >= arch::kWarpGroupThreads;
    const int tid = thread_index % arch::kWarpGroupThreads;
    const int32_t head = int32_t(tile.head);
    const ConvertPlan items = convert_plan<T>(tid);
    if (!is_v && tid == 0) {
      arch::tma_prefetch_desc(&p.base.q_map);
      issue_q(p.base, s, tile);
    }
    const uint8_t* code = is_v ? p.v_code : p.k_code;
    const uint16_t* scale = is_v ? p.v_scale : p.k_scale;
    // The item's key row in a tile (pass 0) and its first code in the row.
    const int64_t row = int64_t(items.src / T::kCodeRowBytes);
    const int64_t in_row = int64_t(head) * T::kHeadDim + items.elem;
    const int64_t pass_stride = int64_t(T::kRowsPerPass) * p.code_stride;
    auto load_tile = [&](Codes& c, int t) {
      const int64_t key = p.base.key_begin + int64_t(t) * T::kBlockN + row;
      load(c, code + key * p.code_stride + in_row, p.base.key_end - key, pass_stride);
    };
    // This thread's key's scale of tile t (0 past the keys: masked).
    auto scale_of = [&](int t) {
      return AttnI8rLoad<T>::key_scale(p, scale, tile, n_tiles, t, tid);
    };
    const int scale_barrier = T::kScaleBarrier + (is_v ? 1 : 0);
    Codes codes;
    load_tile(codes, 0);
    uint16_t sc = scale_of(0);
    for (int t = 0; t < n_tiles; ++t) {
      const int stage = t % T::kStages;
      const uint32_t free_parity = uint32_t((t / T::kStages) & 1) ^ 1u;
      const uint32_t tile16 = is_v ? s.v(stage) : s.k(stage);
      const uint32_t slot = is_v ? s.v_scales(stage) : s.k_scales(stage);
      // The release first: the loads issued after the last arrive land
      // during it. The slot's last readers (tile t - kStages) passed this
      // warpgroup's barrier of tile t - kStages + 1 long before.
      arch::mbar_wait(is_v ? s.v_empty(stage) : s.k_empty(stage), free_parity);
      AttnI8rLoad<T>::store_scale(slot, tid, sc);
      arch::named_bar_sync(scale_barrier, T::kConverterThreads);
      convert(codes, tile16, slot, items);
      wgmma::fence_proxy_async_smem();
      arch::mbar_arrive(is_v ? s.v_full(stage) : s.k_full(stage));
      if (t + 1 < n_tiles) {
        load_tile(codes, t + 1);
        sc = scale_of(t + 1);
      }
    }
  }
};

}  // namespace h3s::cuda::attn
