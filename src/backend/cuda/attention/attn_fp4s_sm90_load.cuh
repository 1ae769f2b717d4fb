// The kvfp4s producer's work on one operand (the dual producer,
// attn_fp4s_sm90_dual_load.cuh, runs it on each of its two warpgroups):
// thread i loads key i's scales (bf16), threads 0-63 the tile's K means and
// thread 64 its globals, all from global memory one tile ahead, into the
// stage's slot (fetch, put); then the code tile is decoded into the stage
// in the exact kernel's swizzled layout (decode). The one-warpgroup producer
// that ran both operands in turn lost to the dual one; its loop is in
// bench/results/experiments/removed_kvfp4s_variants.diff.
//
// Decoding (kv/fp4_decode.cuh, shared with the decode kernel other GPUs run)
// takes no conversion instruction for the codes. Then per pair, as
// kvfmt/kvfp4s.hpp defines: x^ = mul.rn.bf16x2(|e2m1| with sign, scale)
// (exact), K~ = fma.rn.bf16x2(x^, g_k, mean) and V~ = mul.rn.bf16x2(x^, g_v),
// each one rounding from the exact value.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/tma.cuh"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_params.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_load.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_smem.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"
#include "backend/cuda/kv/fp4_decode.cuh"

namespace h3s::cuda::attn {

namespace fp4s {

using cuda::fp4s::decode_e2m1x8;
using cuda::fp4s::e4m3x8_to_bf16;
using cuda::fp4s::fma_bf16x2;
using cuda::fp4s::mul_bf16x2;

// Read-only global loads, issued where they stand (volatile).
__device__ __forceinline__ uint2 ld_global_u64(const void* a) {
  uint2 v;
  asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(a));
  return v;
}
__device__ __forceinline__ uint32_t ld_global_u32(const void* a) {
  uint32_t v;
  asm volatile("ld.global.nc.u32 %0, [%1];" : "=r"(v) : "l"(a));
  return v;
}

}  // namespace fp4s

template <class T>
struct AttnFp4sLoad {
  // What thread i loads for one operand of a tile, one tile ahead: key i's
  // scales; for K, threads 0-63 one mean pair; thread 64 the operand's global.
  struct OperandData {
    uint2 scales;
    uint32_t extra;
  };

  // The loads are volatile asm so that they issue here, a whole tile before
  // their use (ncu showed the first conversion of each tile waiting on the
  // plain loads, long scoreboard; the tile time did not move when they were
  // pinned: the decode itself is the producer's critical path).
  template <bool kIsV>
  __device__ static OperandData fetch(const AttnFp4sParams& p, int32_t head, int t, int n_tiles,
                                      int tid) {
    OperandData d{};
    if (t >= n_tiles) return d;
    const int64_t key0 = p.base.key_begin + int64_t(t) * T::kBlockN, key = key0 + tid;
    if (key < p.base.key_end)  // past the keys: scale 0 (and masked)
      d.scales = fp4s::ld_global_u64((kIsV ? p.v_scale : p.k_scale) + key * p.scale_stride +
                                     int64_t(head) * T::kGroups);
    const int64_t block = key0 / T::kStatBlock;
    if (!kIsV && tid < T::kHeadDim / 2) {
      d.extra = fp4s::ld_global_u32(p.k_mean + block * p.mean_stride + int64_t(head) * T::kHeadDim +
                                    2 * tid);
    } else if (tid == T::kHeadDim / 2) {
      d.extra =
          fp4s::ld_global_u32((kIsV ? p.v_global : p.k_global) + block * p.global_stride + head);
    }
    return d;
  }

  // Into the stage's slot: the key's scales (bf16), K's mean pair, the
  // operand's global as a bf16 pair.
  template <bool kIsV>
  __device__ static void put(uint32_t slot, const OperandData& d, int tid) {
    const uint4 sc = fp4s::e4m3x8_to_bf16(d.scales);
    const uint32_t at = slot + (kIsV ? uint32_t(T::kBlockN) * T::kScaleItemBytes : 0u) +
                        uint32_t(tid) * T::kScaleItemBytes;
    i8r::st_shared_u128(at, sc.x, sc.y, sc.z, sc.w);
    if (!kIsV && tid < T::kHeadDim / 2) {
      asm volatile("st.shared.u32 [%0], %1;" ::"r"(slot + T::kSlotMeans + 4u * uint32_t(tid)),
                   "r"(d.extra)
                   : "memory");
    } else if (tid == T::kHeadDim / 2) {
      const uint32_t g = d.extra >> 16;  // a bf16 value held in fp32
      asm volatile("st.shared.u32 [%0], %1;" ::"r"(slot + T::kSlotGlobals + (kIsV ? 4u : 0u)),
                   "r"(g | g << 16)
                   : "memory");
    }
  }

  // One code tile -> one bf16 tile: kPasses passes of one item per thread,
  // kBatch items loaded before the first is decoded.
  template <bool kKeys>
  __device__ static void decode(uint32_t codes, uint32_t tile, uint32_t slot,
                                const ConvertPlan& plan) {
    constexpr uint32_t kPassScaleBytes = T::kRowsPerPass * T::kScaleItemBytes;
    const uint32_t src = codes + plan.src, dst0 = tile + plan.dst0, dst1 = tile + plan.dst1;
    const uint32_t scales = slot + (kKeys ? 0u : uint32_t(T::kBlockN) * T::kScaleItemBytes) +
                            plan.scale + (plan.elem / T::kGroup) * 2u;
    uint32_t g2;
    asm volatile("ld.shared.u32 %0, [%1];"
                 : "=r"(g2)
                 : "r"(slot + T::kSlotGlobals + (kKeys ? 0u : 4u)));
    uint32_t mean[8] = {};
    if constexpr (kKeys) {
      const uint4 m0 = i8r::ld_shared_u128(slot + T::kSlotMeans + plan.elem * 2u);
      const uint4 m1 = i8r::ld_shared_u128(slot + T::kSlotMeans + plan.elem * 2u + 16u);
      const uint32_t m[8] = {m0.x, m0.y, m0.z, m0.w, m1.x, m1.y, m1.z, m1.w};
#pragma unroll
      for (int j = 0; j < 8; ++j) mean[j] = m[j];
    }
#pragma unroll
    for (int i = 0; i < T::kPasses; i += T::kBatch) {
      uint2 w[T::kBatch];
      uint32_t s2[T::kBatch];
#pragma unroll
      for (int b = 0; b < T::kBatch; ++b) {
        w[b] = i8r::ld_shared_u64(src + (i + b) * T::kPassCodeBytes);
        s2[b] = i8r::ld_shared_scale2(scales + (i + b) * kPassScaleBytes);
      }
#pragma unroll
      for (int b = 0; b < T::kBatch; ++b) {
        uint32_t o[8];
        fp4s::decode_e2m1x8(w[b].x, reinterpret_cast<uint32_t(&)[4]>(o[0]));
        fp4s::decode_e2m1x8(w[b].y, reinterpret_cast<uint32_t(&)[4]>(o[4]));
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const uint32_t x = fp4s::mul_bf16x2(o[j], s2[b]);
          o[j] = kKeys ? fp4s::fma_bf16x2(x, g2, mean[j]) : fp4s::mul_bf16x2(x, g2);
        }
        i8r::st_shared_u128(dst0 + (i + b) * T::kPassBytes, o[0], o[1], o[2], o[3]);
        i8r::st_shared_u128(dst1 + (i + b) * T::kPassBytes, o[4], o[5], o[6], o[7]);
      }
    }
  }
};

}  // namespace h3s::cuda::attn
