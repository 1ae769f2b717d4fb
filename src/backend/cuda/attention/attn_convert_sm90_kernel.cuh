// The kernel shape both converting tiers share (kvi8r, kvfp4s): the
// warp-specialised exact kernel's consumers (AttnWsConsumer, reading the
// 16-bit K/V ring as they always do) fed by producer warpgroups that load
// the tier's codes and convert them into that ring (a Load class:
// attn_i8r_sm90_dual_direct_load.cuh, attn_fp4s_sm90_dual_load.cuh), in the
// shared-memory layout of AttnI8rSmem under the tier's traits; and its
// launch. (Its entry repeats attn_fwd_ws_sm90.cu's with these types: each
// family keeps its own, so no change to one moves another's kernel.)
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/attention/attn_i8r_sm90_smem.cuh"
#include "backend/cuda/attention/attn_ws_sm90_mainloop.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"
#include "backend/cuda/common.cuh"

namespace h3s::cuda::attn {

// P: the tier's parameters, the exact kernel's in p.base.
template <class T, class Load, class P>
__global__ void __launch_bounds__(T::kThreads, 1)
    attn_fwd_convert_sm90(const __grid_constant__ P p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const AttnI8rSmem<T> smem = AttnI8rSmem<T>::from(smem_raw);
  const AttnWsTile tile = AttnWsStaticScheduler<T>::tile();
  const int n_tiles = int((p.base.key_end - p.base.key_begin + T::kBlockN - 1) / T::kBlockN);
  if (threadIdx.x == 0) smem.init_barriers();
  __syncthreads();
  const int wg = arch::warpgroup_index();
  if (wg < T::kProducerWarpGroups) {
    arch::setmaxnreg_dec<T::kProducerRegs>();
    Load::run(p, smem, tile, n_tiles, int(threadIdx.x));
  } else {
    arch::setmaxnreg_inc<T::kConsumerRegs>();
    const AttnWsConsumer<T> consumer{wg - T::kProducerWarpGroups, 2 * (int(threadIdx.x) % 4)};
    consumer.run(p.base, smem, tile, n_tiles);
  }
#else
  (void)p;
  __trap();  // never launched: the dispatcher selects these kernels on sm_90 only
#endif
}

template <class T, class Load, class P>
void launch_convert_sm90(const P& p, cudaStream_t s, const char* what) {
  const auto kernel = attn_fwd_convert_sm90<T, Load, P>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::kSmemBytes));
  kernel<<<AttnWsStaticScheduler<T>::grid(p.base.rows, p.base.heads), T::kThreads, T::kSmemBytes,
           s>>>(p);
  check_launch(what);
}

}  // namespace h3s::cuda::attn
