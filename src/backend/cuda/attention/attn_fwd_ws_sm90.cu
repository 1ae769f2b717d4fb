// The warp-specialised Hopper attention forward (sm_90a): the kernel that
// composes the producer (attn_ws_sm90_load.cuh), the consumer mainloop
// (attn_ws_sm90_mainloop.cuh) and the state ends (attn_ws_sm90_epilogue.cuh)
// under AttnWsTraits, and its launcher, which builds the TMA descriptors.
// One instantiation: a 2-stage ring with ping-pong (kernel_choice.hpp; the
// variants that lost, a third stage and no ping-pong, are in
// bench/results/experiments/removed_attn_ws_variants.diff).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/arch/tma_desc.hpp"
#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/attention/attn_ws_sm90_load.cuh"
#include "backend/cuda/attention/attn_ws_sm90_mainloop.cuh"
#include "backend/cuda/attention/attn_ws_sm90_params.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"
#include "backend/cuda/attention/attn_ws_sm90_smem.cuh"
#include "backend/cuda/attention/attn_ws_sm90_traits.cuh"
#include "backend/cuda/common.cuh"

namespace h3s::cuda::attn {
namespace ws {

template <class T>
__global__ void __launch_bounds__(T::kThreads, 1)
    attn_fwd_ws_sm90(const __grid_constant__ AttnWsParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const AttnWsSmem<T> smem = AttnWsSmem<T>::from(smem_raw);
  const AttnWsTile tile = AttnWsStaticScheduler<T>::tile();
  const int n_tiles = int((p.key_end - p.key_begin + T::kBlockN - 1) / T::kBlockN);
  if (threadIdx.x == 0) smem.init_barriers();
  __syncthreads();
  const int wg = arch::warpgroup_index();
  if (wg < T::kProducerWarpGroups) {
    arch::setmaxnreg_dec<T::kProducerRegs>();
    if (threadIdx.x == 0) AttnWsLoad<T>::run(p, smem, tile, n_tiles);
  } else {
    arch::setmaxnreg_inc<T::kConsumerRegs>();
    const AttnWsConsumer<T> consumer{wg - T::kProducerWarpGroups, 2 * (int(threadIdx.x) % 4)};
    consumer.run(p, smem, tile, n_tiles);
  }
#else
  (void)p;
  __trap();  // never launched: the dispatcher selects this kernel on sm_90 only
#endif
}

template <class T>
void launch(const FwdParams& f, const FwdEnds& ends, cudaStream_t s) {
  AttnWsParams p{};
  const uint64_t kRowBytes = uint64_t(T::kHeadDim) * T::kElemBytes;
  const uint32_t q_box[3] = {uint32_t(T::kHalfDims), 1, uint32_t(T::kBlockM)};
  const uint32_t kv_box[3] = {uint32_t(T::kHalfDims), 1, uint32_t(T::kBlockN)};
  p.q_map =
      arch::encode_bf16_swizzle128({f.q,
                                    {uint64_t(T::kHeadDim), uint64_t(f.heads), uint64_t(f.rows)},
                                    {kRowBytes, uint64_t(f.ldq) * T::kElemBytes}},
                                   q_box, "attention q");
  const uint64_t kv_strides[2] = {uint64_t(f.kv_head_stride) * T::kElemBytes,
                                  uint64_t(f.kv_seq_stride) * T::kElemBytes};
  const uint64_t kv_extent[3] = {uint64_t(T::kHeadDim), uint64_t(f.heads), uint64_t(f.key_end)};
  p.k_map = arch::encode_bf16_swizzle128(
      {f.k, {kv_extent[0], kv_extent[1], kv_extent[2]}, {kv_strides[0], kv_strides[1]}}, kv_box,
      "attention k");
  p.v_map = arch::encode_bf16_swizzle128(
      {f.v, {kv_extent[0], kv_extent[1], kv_extent[2]}, {kv_strides[0], kv_strides[1]}}, kv_box,
      "attention v");
  p.rows = f.rows;
  p.heads = f.heads;
  p.key_begin = f.key_begin;
  p.key_end = f.key_end;
  p.m = f.m;
  p.l = f.l;
  p.acc = f.acc;
  p.out = ends.out;
  p.ldo = ends.ldo;
  p.fresh = ends.fresh;
  const auto kernel = attn_fwd_ws_sm90<T>;
  cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(T::kSmemBytes));
  kernel<<<AttnWsStaticScheduler<T>::grid(f.rows, f.heads), T::kThreads, T::kSmemBytes, s>>>(p);
  check_launch("attn_fwd_ws_sm90");
}

}  // namespace ws

void attention_fwd_ws_sm90(const FwdParams& p, const FwdEnds& ends, cudaStream_t s) {
  ws::launch<AttnWsTraits<2, true>>(p, ends, s);
}

}  // namespace h3s::cuda::attn
