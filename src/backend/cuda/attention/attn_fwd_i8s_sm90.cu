// The kvi8s Hopper attention (sm_90a): int8 Q K^T and fp8 P V on wgmma over
// the tier's store (kvfmt/kvi8s.hpp), under AttnI8sTraits: the producer's TMA
// loads (attn_i8s_sm90_load.cuh) feed two consumer warpgroups
// (attn_i8s_sm90_mainloop.cuh); and its launcher, which builds the TMA maps.
// This is io-pr-ts (kernel_choice.hpp): the overlap schedule with P from
// registers and the row sums on the tensor cores, over the fused exponent
// and the integer-pipe conversion. The variants that lost and their figures:
// bench/results/experiments/removed_kvi8s_variants.diff, docs/PERFORMANCE.md.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/arch/tma_desc.hpp"
#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_load.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_mainloop.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_params.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_smem.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_traits.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/attention/attn_tier_sm90_launch.hpp"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"
#include "backend/cuda/common.cuh"

namespace h3s::cuda::attn {
namespace i8s {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    attn_fwd_i8s_sm90(const __grid_constant__ AttnI8sParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const AttnI8sSmem<T> smem = AttnI8sSmem<T>::from(smem_raw);
  const AttnWsTile tile = AttnWsStaticScheduler<T>::tile();
  const int n_tiles = int((p.base.key_end - p.base.key_begin + T::kBlockN - 1) / T::kBlockN);
  if (threadIdx.x == 0) smem.init_barriers();
  smem.write_ones();
  __syncthreads();
  const int wg = arch::warpgroup_index();
  if (wg < T::kProducerWarpGroups) {
    arch::setmaxnreg_dec<T::kProducerRegs>();
    if (threadIdx.x == 0) AttnI8sLoad<T>::run(p, smem, tile, n_tiles);
  } else {
    arch::setmaxnreg_inc<T::kConsumerRegs>();
    const AttnI8sConsumer<T> consumer{wg - T::kProducerWarpGroups, int(threadIdx.x) % 32};
    consumer.run(p, smem, tile, n_tiles);
  }
#else
  (void)p;
  __trap();  // never launched: the dispatcher selects this kernel on sm_90 only
#endif
}

template <class T>
void launch(const KvI8sFwdParams& f, cudaStream_t s) {
  AttnI8sParams p{};
  p.base = tier_base<T>(f, false, "kvi8s");
  const uint32_t k_box[3] = {uint32_t(T::kRowBytes), 1, uint32_t(T::kBlockN)};
  p.base.k_map =
      arch::encode_u8_swizzle128({f.k_code,
                                  {uint64_t(T::kRowBytes), uint64_t(f.heads), uint64_t(f.key_end)},
                                  {uint64_t(T::kRowBytes), uint64_t(f.code_stride)}},
                                 k_box, "kvi8s attention K codes");
  // V^T: [heads][128 channels][padded keys]; a box is one tile's keys of a
  // head's 128 channels.
  const uint32_t v_box[3] = {uint32_t(T::kBlockN), uint32_t(T::kHeadDim), 1};
  p.base.v_map = arch::encode_u8_swizzle128(
      {f.v_code,
       {uint64_t(f.v_stride), uint64_t(T::kHeadDim), uint64_t(f.heads)},
       {uint64_t(f.v_stride), uint64_t(f.v_stride) * uint64_t(T::kHeadDim)}},
      v_box, "kvi8s attention V codes");
  const arch::Tensor3d header{
      f.header,
      {uint64_t(T::kRowBytes), uint64_t(kvi8s::kHeaderRows), uint64_t(f.header_records)},
      {uint64_t(T::kRowBytes), uint64_t(kvi8s::kHeaderBytes)}};
  const uint32_t hk_box[3] = {uint32_t(T::kRowBytes), uint32_t(T::kHeaderKRows), 1};
  const uint32_t hv_box[3] = {uint32_t(T::kRowBytes), uint32_t(T::kHeaderVRows), 1};
  p.header_k_map = arch::encode_u8_swizzle128(header, hk_box, "kvi8s attention header (K)");
  p.header_v_map = arch::encode_u8_swizzle128(header, hv_box, "kvi8s attention header (V)");
  const auto kernel = attn_fwd_i8s_sm90<T>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::kSmemBytes));
  kernel<<<AttnWsStaticScheduler<T>::grid(f.rows, f.heads), T::kThreads, T::kSmemBytes, s>>>(p);
  check_launch("attn_fwd_i8s_sm90");
}

}  // namespace i8s

void attention_fwd_kvi8s_sm90(const KvI8sFwdParams& p, cudaStream_t s) {
  i8s::launch<AttnI8sTraits>(p, s);
}

}  // namespace h3s::cuda::attn
