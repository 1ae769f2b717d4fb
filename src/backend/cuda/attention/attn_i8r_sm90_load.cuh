// What the converting tiers' producers share (kvi8r's,
// attn_i8r_sm90_dual_direct_load.cuh; kvfp4s', attn_fp4s_sm90_dual_load.cuh):
// shared-memory accessors, each converter thread's item plan, the TMA issue
// of Q and (kvfp4s' code ring) of a code tile, and kvi8r's per-key scale and
// item stores. The items are stored fp16 of code x scale in the exact
// kernel's swizzled layout, so the consumers are the exact kernel's (fp16
// operands) and never see a scale. The dequantisation is kv/i8r_decode.cuh's
// (the decode kernel's). The one-warpgroup producer that first ran these (a
// code ring kI8Stages deep) lost to the dual direct one; its loop is in
// bench/results/experiments/removed_kvi8r_variants.diff.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/tma.cuh"
#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_params.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_smem.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"
#include "backend/cuda/kv/i8r_decode.cuh"

namespace h3s::cuda::attn {

namespace i8r {

using cuda::i8r::dequant_f16;  // kv/i8r_decode.cuh

// A key's fp16 scale from shared memory, in both halves of a 32-bit register.
__device__ __forceinline__ uint32_t ld_shared_scale2(uint32_t a) {
  uint32_t r;
  asm volatile("{\n .reg .b16 s;\n ld.shared.b16 s, [%1];\n mov.b32 %0, {s, s};\n}"
               : "=r"(r)
               : "r"(a));
  return r;
}

__device__ __forceinline__ uint2 ld_shared_u64(uint32_t a) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(a));
  return v;
}
__device__ __forceinline__ uint4 ld_shared_u128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(a));
  return v;
}
__device__ __forceinline__ void st_shared_u128(uint32_t a, uint32_t x, uint32_t y, uint32_t z,
                                               uint32_t w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w)
               : "memory");
}
__device__ __forceinline__ void st_shared_u16(uint32_t a, uint16_t v) {
  asm volatile("st.shared.u16 [%0], %1;" ::"r"(a), "h"(v) : "memory");
}

}  // namespace i8r

// Where one converter thread's items sit, in the code tile (unswizzled rows
// of kCodeRowBytes: 128 one-byte codes for kvi8r, 64 bytes of e2m1 pairs for
// kvfp4s) and in the 16-bit tile (two halves of 128-byte swizzled rows), in
// a tile's first pass of kRowsPerPass rows; pass i adds i kRowsPerPass rows
// to each. Fixed per thread, so a tile's addresses are one add and immediate
// offsets (the first version derived them per item with signed division and
// spent more issue slots on addresses than on conversion).
struct ConvertPlan {
  uint32_t src;    // the item's codes
  uint32_t dst0;   // its first 16-byte chunk of 16-bit values
  uint32_t dst1;   // its second (16-code items)
  uint32_t scale;  // its key's scales in the tile's scale slot (kScaleItemBytes a key)
  uint32_t elem;   // its first element's channel
};

// 16-code items: 16 threads cover a row pair (2 rows x 8 items). A
// quarter-warp takes the lower half of one row and the upper half of the
// other, so its 16-byte loads cover 128 distinct bytes of banks and its
// stores land on positions of both parities (j ^ (row % 8) with rows of
// different parity): no bank conflict on either side. 8-code items: a
// quarter-warp converts one row half, chunk c to position c ^ (row % 8).
template <class T>
__device__ ConvertPlan convert_plan(int tid) {
  constexpr uint32_t kRowBytes = wgmma::kSwizzleBytes, kChunk = 16;
  constexpr uint32_t kCodeBits = 8u * T::kCodeRowBytes / T::kHeadDim;  // 8 or 4
  const uint32_t u = uint32_t(tid);
  if constexpr (T::kItemCodes == 16) {
    const uint32_t pair = u / 16, quarter = (u / 8) % 2, half = (u / 4) % 2, pos = u % 4;
    const uint32_t row = 2 * pair + (quarter ^ half), chunk = 2 * pos;
    const uint32_t line = half * T::kKvHalfBytes + row * kRowBytes;
    const uint32_t elem = half * T::kHalfDims + pos * T::kItemCodes;
    return {row * T::kCodeRowBytes + elem * kCodeBits / 8, line + (chunk ^ (row % 8)) * kChunk,
            line + ((chunk + 1) ^ (row % 8)) * kChunk, row * T::kScaleItemBytes, elem};
  } else {
    const uint32_t row = u / 16, half = (u / 8) % 2, chunk = u % 8;
    const uint32_t line = half * T::kKvHalfBytes + row * kRowBytes;
    const uint32_t elem = half * T::kHalfDims + chunk * T::kItemCodes;
    return {row * T::kCodeRowBytes + elem * kCodeBits / 8, line + (chunk ^ (row % 8)) * kChunk, 0,
            row * T::kScaleItemBytes, elem};
  }
}

// The issuing thread's TMA of the work tile's Q (both 64-dimension halves)
// onto q_full (every converting producer: kvi8r's and kvfp4s').
template <class T>
__device__ void issue_q(const AttnWsParams& p, const AttnI8rSmem<T>& s, AttnWsTile tile) {
  arch::mbar_arrive_expect_tx(s.q_full(), T::kQBytes);
#pragma unroll
  for (int h = 0; h < T::kHalves; ++h)
    arch::tma_load_3d(s.q() + uint32_t(h) * T::kQHalfBytes, &p.q_map, s.q_full(), h * T::kHalfDims,
                      int32_t(tile.head), int32_t(tile.row0));
}

// Tile t's K (or V) codes into code stage t % kI8Stages once the converters
// have released it (kvfp4s' producers: kvi8r's load their codes from L2).
template <class T>
__device__ void issue_code_tile(const AttnWsParams& p, const AttnI8rSmem<T>& s, bool is_v,
                                int32_t head, int t) {
  const int s8 = t % T::kI8Stages;
  const uint32_t free_parity = uint32_t((t / T::kI8Stages) & 1) ^ 1u;
  const int32_t key0 = int32_t(p.key_begin + int64_t(t) * T::kBlockN);
  const uint32_t full = is_v ? s.v_codes_full(s8) : s.k_codes_full(s8);
  arch::mbar_wait(is_v ? s.v_codes_empty(s8) : s.k_codes_empty(s8), free_parity);
  arch::mbar_arrive_expect_tx(full, T::kI8TileBytes);
  arch::tma_load_3d(is_v ? s.v_codes(s8) : s.k_codes(s8), is_v ? &p.v_map : &p.k_map, full, 0, head,
                    key0);
}

template <class T>
struct AttnI8rLoad {
  // Eight codes (two words) times their key's scale -> one 16-byte chunk.
  __device__ static void store_chunk(uint32_t dst, uint32_t w0, uint32_t w1, uint32_t scale2) {
    uint32_t o[4];
    i8r::dequant_f16(w0, scale2, o[0], o[1]);
    i8r::dequant_f16(w1, scale2, o[2], o[3]);
    i8r::st_shared_u128(dst, o[0], o[1], o[2], o[3]);
  }
  // One item (8 codes) times its key's scale.
  __device__ static void store_item(uint32_t dst, uint2 w, uint32_t scale2) {
    store_chunk(dst, w.x, w.y, scale2);
  }

  // Key `tid` of tile t's fp16 scale in `scale` (K's or V's), 0 past the
  // keys (masked); the dual producer's one operand each.
  __device__ static uint16_t key_scale(const AttnI8rParams& p, const uint16_t* scale,
                                       AttnWsTile tile, int n_tiles, int t, int tid) {
    const int64_t key = p.base.key_begin + int64_t(t) * T::kBlockN + tid;
    const bool live = t < n_tiles && key < p.base.key_end;
    return live ? scale[key * p.scale_key + int64_t(tile.head) * p.scale_head] : uint16_t(0);
  }

  // Key `tid`'s fp16 scale into a tile's scale slot.
  __device__ static void store_scale(uint32_t scales, int tid, uint16_t bits) {
    i8r::st_shared_u16(scales + uint32_t(tid) * T::kScaleItemBytes, bits);
  }
};

}  // namespace h3s::cuda::attn
