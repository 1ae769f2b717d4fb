// The kvi8r Hopper attention (sm_90a): the converting kernel
// (attn_convert_sm90_kernel.cuh: the warp-specialised exact kernel's
// consumers) fed by two producer warpgroups, one per operand, that load
// their int8 K/V codes from L2 into registers and dequantise them to fp16
// in shared memory (attn_i8r_sm90_dual_direct_load.cuh), under
// AttnI8rTraits; and its launcher. This is dual-direct2 (kernel_choice.hpp);
// the variants that lost, one producer warpgroup or two over a code ring,
// and their figures: bench/results/experiments/removed_kvi8r_variants.diff,
// docs/PERFORMANCE.md "kvi8r".
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention/attn_convert_sm90_kernel.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_dual_direct_load.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_params.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_traits.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/attention/attn_tier_sm90_launch.hpp"
#include "backend/cuda/common.cuh"

namespace h3s::cuda::attn {

void attention_fwd_kvi8r_sm90(const KvI8rFwdParams& f, bool fresh, cudaStream_t s) {
  using T = AttnI8rTraits;
  static_assert(T::kCodeRowBytes == T::kHeadDim, "a code row is one byte a dimension");
  AttnI8rParams p{};
  p.base = tier_base<T>(f, fresh, "kvi8r");  // the K/V maps stay empty: no TMA of the codes
  p.k_scale = f.k_scale;
  p.v_scale = f.v_scale;
  p.scale_key = f.scale_key;
  p.scale_head = f.scale_head;
  p.k_code = f.k_code;
  p.v_code = f.v_code;
  p.code_stride = f.code_stride;
  launch_convert_sm90<T, AttnI8rDualDirectLoad<T>>(p, s, "attn_fwd_i8r_sm90");
}

}  // namespace h3s::cuda::attn
