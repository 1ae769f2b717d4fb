// The kvfp4s Hopper attention (sm_90a): the converting kernel
// (attn_convert_sm90_kernel.cuh: the warp-specialised exact kernel's bf16
// consumers) fed by two producer warpgroups, one per operand, that load
// NVFP4 K/V codes with TMA and decode them to bf16 in shared memory
// (attn_fp4s_sm90_dual_load.cuh), under AttnFp4sTraits; and its launcher.
// This is dual-batch2: the comparison run's kernel, since the decode path is
// the default on every GPU (kernel_choice.hpp). The variants that lost, one
// producer warpgroup and deeper batches, and their figures:
// bench/results/experiments/removed_kvfp4s_variants.diff, docs/PERFORMANCE.md
// "kvfp4s".
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention/attn_convert_sm90_kernel.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_dual_load.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_params.cuh"
#include "backend/cuda/attention/attn_fp4s_sm90_traits.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/attention/attn_tier_sm90_launch.hpp"
#include "kvfmt/kvfp4s.hpp"

namespace h3s::cuda::attn {

void attention_fwd_kvfp4s_sm90(const KvFp4sFwdParams& f, cudaStream_t s) {
  using T = AttnFp4sTraits;
  static_assert(T::kGroups == kvfp4s::kGroups && T::kGroup == kvfp4s::kGroup,
                "the kernel's scale groups are the tier's");
  static_assert(T::kStatBlock == kvfp4s::kBlock && kvfp4s::kBlock % T::kBlockN == 0,
                "a key tile lies in one of the tier's stat blocks");
  AttnFp4sParams p{};
  p.base = tier_base<T>(f, false, "kvfp4s");
  code_maps<T>(p.base, f, "kvfp4s");
  p.k_scale = f.k_scale;
  p.v_scale = f.v_scale;
  p.scale_stride = f.scale_stride;
  p.k_global = f.k_global;
  p.v_global = f.v_global;
  p.global_stride = f.global_stride;
  p.k_mean = f.k_mean;
  p.mean_stride = f.mean_stride;
  launch_convert_sm90<T, AttnFp4sDualLoad<T>>(p, s, "attn_fwd_fp4s_sm90");
}

}  // namespace h3s::cuda::attn
