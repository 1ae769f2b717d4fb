// The kvfp4s Hopper attention (sm_90a): the converting kernel
// (attn_convert_sm90_kernel.cuh: the warp-specialised exact kernel's bf16
// consumers) fed by a producer warpgroup that loads NVFP4 K/V codes with TMA
// and decodes them to bf16 in shared memory (attn_fp4s_sm90_load.cuh), under
// AttnFp4sTraits; and its launcher. The variants (code-ring depth, items
// loaded before the first is decoded) are built side by side so one binary
// measures them.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/arch/tma_desc.hpp"
#include "backend/cuda/attention/attn_convert_sm90_kernel.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_dual_load.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_load.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_params.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_traits.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "kvfmt/kvfp4s.hpp"

namespace h3s::cuda::attn {

namespace {

template <class T, template <class> class Load = AttnFp4sLoad>
void launch_fp4s(const KvFp4sFwdParams& f, cudaStream_t s) {
  static_assert(T::kGroups == kvfp4s::kGroups && T::kGroup == kvfp4s::kGroup,
                "the kernel's scale groups are the tier's");
  static_assert(T::kStatBlock == kvfp4s::kBlock && kvfp4s::kBlock % T::kBlockN == 0,
                "a key tile lies in one of the tier's stat blocks");
  AttnFp4sParams p{};
  const uint64_t kRowBytes = uint64_t(T::kHeadDim) * T::kElemBytes;
  const uint32_t q_box[3] = {uint32_t(T::kHalfDims), 1, uint32_t(T::kBlockM)};
  const uint32_t code_box[3] = {uint32_t(T::kCodeRowBytes), 1, uint32_t(T::kBlockN)};
  p.base.q_map =
      arch::encode_bf16_swizzle128({f.q,
                                    {uint64_t(T::kHeadDim), uint64_t(f.heads), uint64_t(f.rows)},
                                    {kRowBytes, uint64_t(f.ldq) * T::kElemBytes}},
                                   q_box, "kvfp4s attention q");
  const uint64_t extent[3] = {uint64_t(T::kCodeRowBytes), uint64_t(f.heads), uint64_t(f.key_end)};
  const uint64_t strides[2] = {uint64_t(T::kCodeRowBytes), uint64_t(f.code_stride)};
  p.base.k_map =
      arch::encode_u8({f.k_code, {extent[0], extent[1], extent[2]}, {strides[0], strides[1]}},
                      code_box, "kvfp4s attention K codes");
  p.base.v_map =
      arch::encode_u8({f.v_code, {extent[0], extent[1], extent[2]}, {strides[0], strides[1]}},
                      code_box, "kvfp4s attention V codes");
  p.base.rows = f.rows;
  p.base.heads = f.heads;
  p.base.key_begin = f.key_begin;
  p.base.key_end = f.key_end;
  p.base.m = f.m;
  p.base.l = f.l;
  p.base.acc = f.acc;
  p.base.out = nullptr;
  p.base.fresh = false;
  p.k_scale = f.k_scale;
  p.v_scale = f.v_scale;
  p.scale_stride = f.scale_stride;
  p.k_global = f.k_global;
  p.v_global = f.v_global;
  p.global_stride = f.global_stride;
  p.k_mean = f.k_mean;
  p.mean_stride = f.mean_stride;
  launch_convert_sm90<T, Load<T>>(p, s, "attn_fwd_fp4s_sm90");
}

}  // namespace

void attention_fwd_kvfp4s_sm90(const KvFp4sFwdParams& p, AttnFp4sVariant v, cudaStream_t s) {
  switch (v) {
    case AttnFp4sVariant::codes2_batch2:
      return launch_fp4s<AttnFp4sTraits<2, 2>>(p, s);
    case AttnFp4sVariant::codes2_batch4:
      return launch_fp4s<AttnFp4sTraits<2, 4>>(p, s);
    case AttnFp4sVariant::dual_batch2:
      return launch_fp4s<AttnFp4sTraits<2, 2, true>, AttnFp4sDualLoad>(p, s);
    case AttnFp4sVariant::dual_batch4:
      return launch_fp4s<AttnFp4sTraits<2, 4, true>, AttnFp4sDualLoad>(p, s);
  }
  fail_internal("attention_fwd_kvfp4s_sm90: unknown variant");
}

}  // namespace h3s::cuda::attn
