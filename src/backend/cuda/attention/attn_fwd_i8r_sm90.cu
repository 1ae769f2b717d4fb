// The kvi8r Hopper attention (sm_90a): the converting kernel
// (attn_convert_sm90_kernel.cuh: the warp-specialised exact kernel's
// consumers) fed by a producer warpgroup that loads int8 K/V codes with TMA
// and dequantises them to fp16 in shared memory (attn_i8r_sm90_load.cuh),
// under AttnI8rTraits (or two producer warpgroups, one per operand:
// attn_i8r_sm90_dual_load.cuh, attn_i8r_sm90_dual_direct_load.cuh); and its
// launcher. The variants (one or two producer warpgroups, with or without
// a code ring) are built side by side so one binary measures them.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/arch/tma_desc.hpp"
#include "backend/cuda/attention/attn_convert_sm90_kernel.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_dual_direct_load.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_dual_load.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_load.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_params.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_traits.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/common.cuh"

namespace h3s::cuda::attn {
namespace i8r {

template <class T, template <class> class Load = AttnI8rLoad>
void launch(const KvI8rFwdParams& f, bool fresh, cudaStream_t s) {
  AttnI8rParams p{};
  const uint64_t kRowBytes = uint64_t(T::kHeadDim) * T::kElemBytes;
  const uint32_t q_box[3] = {uint32_t(T::kHalfDims), 1, uint32_t(T::kBlockM)};
  const uint32_t code_box[3] = {uint32_t(T::kCodeRowBytes), 1, uint32_t(T::kBlockN)};
  p.base.q_map =
      arch::encode_bf16_swizzle128({f.q,
                                    {uint64_t(T::kHeadDim), uint64_t(f.heads), uint64_t(f.rows)},
                                    {kRowBytes, uint64_t(f.ldq) * T::kElemBytes}},
                                   q_box, "kvi8r attention q");
  const uint64_t extent[3] = {uint64_t(T::kHeadDim), uint64_t(f.heads), uint64_t(f.key_end)};
  const uint64_t strides[2] = {uint64_t(T::kCodeRowBytes), uint64_t(f.code_stride)};
  p.base.k_map =
      arch::encode_u8({f.k_code, {extent[0], extent[1], extent[2]}, {strides[0], strides[1]}},
                      code_box, "kvi8r attention K codes");
  p.base.v_map =
      arch::encode_u8({f.v_code, {extent[0], extent[1], extent[2]}, {strides[0], strides[1]}},
                      code_box, "kvi8r attention V codes");
  p.base.rows = f.rows;
  p.base.heads = f.heads;
  p.base.key_begin = f.key_begin;
  p.base.key_end = f.key_end;
  p.base.m = f.m;
  p.base.l = f.l;
  p.base.acc = f.acc;
  p.base.out = nullptr;
  p.base.fresh = fresh;
  p.k_scale = f.k_scale;
  p.v_scale = f.v_scale;
  p.scale_key = f.scale_key;
  p.scale_head = f.scale_head;
  p.k_code = f.k_code;
  p.v_code = f.v_code;
  p.code_stride = f.code_stride;
  launch_convert_sm90<T, Load<T>>(p, s, "attn_fwd_i8r_sm90");
}

}  // namespace i8r

void attention_fwd_kvi8r_sm90(const KvI8rFwdParams& p, bool fresh, AttnI8rVariant v,
                              cudaStream_t s) {
  switch (v) {
    case AttnI8rVariant::codes2_item8_b8:
      return i8r::launch<AttnI8rTraits<2, 2, 8, true>>(p, fresh, s);
    case AttnI8rVariant::dual_item8:
      return i8r::launch<AttnI8rTraits<2, 2, 0, false, true>, AttnI8rDualLoad>(p, fresh, s);
    case AttnI8rVariant::dual_direct2:
      return i8r::launch<AttnI8rTraits<2, 0, 0, false, true>, AttnI8rDualDirectLoad>(p, fresh, s);
  }
  fail_internal("attention_fwd_kvi8r_sm90: unknown variant");
}

}  // namespace h3s::cuda::attn
