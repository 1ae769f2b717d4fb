// The kvi8s attention on mma.sync, for the GPUs without wgmma that have
// 8-bit tensor cores for both products (sm_89 and newer: RTX 40/50-series,
// L4, L40; Hopper runs it for attn_kernel sm80): per tile S = Q8
// [K; digits]^T on mma.m16n8k32.s8 (exact int32), the Hopper consumer's
// softmax and P packing (AttnI8sConsumer, the same arithmetic), O_t = P V on
// mma.m16n8k32.e4m3 into a fresh fp32 accumulator, and the fold acc =
// fma(O_t, vs, acc * alpha) (the two levels). Layout and schedule are
// AttnI8sSm89Traits': FlashAttention-2's, with the tiles in shared memory as
// TMA would write them, so the header reads are the Hopper kernel's. It
// differs from the Hopper kernel in the order of P V's fp32 sums (the MMA's)
// and in l, summed from the fp32 p (io-pr's arithmetic: its traits' kSumOnTc
// is false): bounded by the tier's GPU tests against the definition.
//
// This file: the kernel and its launcher (attn_dispatch.cpp chooses it). It
// is built for sm_89 and compute_89 besides the backend's images
// (CMakeLists.txt); the sm_80 image holds a trap, never launched.
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/arch/mma_sm80.cuh"
#include "backend/cuda/arch/mma_sm89.cuh"
#include "backend/cuda/attention/attn_i8s_sm89_traits.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_mainloop.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/attention/attn_state.cuh"
#include "backend/cuda/attention/attn_ws_sm90_epilogue.cuh"
#include "backend/cuda/common.cuh"
#include "kvfmt/kvi8s.hpp"

namespace h3s::cuda::attn {
namespace {

using T = AttnI8sSm89Traits;
using TileMath = AttnI8sConsumer<T>;  // the softmax, P's packing and the fold
using arch::cp_async_16;

// (The sm_80 image holds only the kernel's trap: no helper is compiled there.)
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
// Byte offset of 16-byte chunk `chunk` of row `row` of a tile that starts on
// a 1024-byte boundary (TMA's 128-byte swizzle).
__device__ __forceinline__ uint32_t swizzled(uint32_t row, uint32_t chunk) {
  return row * T::kRowBytes + ((chunk ^ (row % 8)) << 4);
}

// The state's two ends as AttnWsEpilogue reads them: always loaded, always
// stored (the caller resets it first and finishes it after the last block).
struct StateEnds {
  int64_t rows;
  int64_t heads;
  float* m;
  float* l;
  float* acc;
  uint16_t* out;
  int64_t ldo;
  bool fresh;
};

// Key tile [key0, key0 + kBlockN) of one head into a stage: K's code rows
// (keys past key_end zero-filled, their source clamped to a key in range),
// the header's K rows after them, V^T's 128 channel rows of the tile's
// positions (whole tiles exist: the store pads them) and the header's V rows
// after those. One commit group, all threads. The thread and head indices
// are read with volatile asm: recomputing the addresses each tile costs a few
// integer ops, keeping them across the key loop costs the registers the
// consumers' accumulators need (measured: spills at 255).
__device__ void load_tile(const KvI8sFwdParams& p, uint32_t k_stage, uint32_t v_stage,
                          int64_t key0) {
  uint32_t tid_x, block_y;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_x));
  asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(block_y));
  const int tid = int(tid_x);
  const int64_t head = block_y;
  // A thread's chunk column and first row; its rows are kRowStep apart.
  constexpr int kRowStep = T::kThreads / T::kChunks;
  constexpr int kRowsEach = T::kBlockN / kRowStep;
  static_assert(T::kBlockN == T::kHeadDim && kRowsEach * kRowStep == T::kBlockN,
                "both code tiles are 128 rows, split evenly over the threads");
  const int c = tid % T::kChunks, r0 = tid / T::kChunks;
  const uint32_t lane_chunk = swizzled(uint32_t(r0), uint32_t(c));  // + kRowStep rows: immediates
  const int8_t* k_src = p.k_code + head * T::kHeadDim + c * 16;
#pragma unroll
  for (int j = 0; j < kRowsEach; ++j) {
    const int64_t key = key0 + r0 + j * kRowStep;
    cp_async_16(k_stage + lane_chunk + uint32_t(j * kRowStep * T::kRowBytes),
                k_src + (key < p.key_end ? key : p.key_end - 1) * p.code_stride, key < p.key_end);
  }
  const uint8_t* v_src = p.v_code + (head * T::kHeadDim + r0) * p.v_stride + key0 + c * 16;
#pragma unroll
  for (int j = 0; j < kRowsEach; ++j)
    cp_async_16(v_stage + lane_chunk + uint32_t(j * kRowStep * T::kRowBytes),
                v_src + int64_t(j * kRowStep) * p.v_stride, true);
  // The tile's header record: (tile, head) in the store's order.
  const uint8_t* header = p.header + ((key0 / T::kBlockN) * p.heads + head) * kvi8s::kHeaderBytes;
  constexpr int kKChunks = T::kHeaderKRows * T::kChunks;
  constexpr int kVChunks = T::kHeaderVRows * T::kChunks;
  static_assert(kKChunks + kVChunks <= T::kThreads, "one header chunk a thread");
  if (tid < kKChunks) {
    const int r = tid / T::kChunks, c = tid % T::kChunks;
    cp_async_16(k_stage + swizzled(uint32_t(T::kBlockN + r), uint32_t(c)),
                header + r * T::kRowBytes + c * 16, true);
  } else if (tid < kKChunks + kVChunks) {
    const int r = (tid - kKChunks) / T::kChunks, c = (tid - kKChunks) % T::kChunks;
    cp_async_16(v_stage + swizzled(uint32_t(T::kHeadDim + r), uint32_t(c)),
                header + (kvi8s::kRowVScale + r) * T::kRowBytes + c * 16, true);
  }
}

// This warp's 16 query rows -> int8 codes in the Q8 tile, from global
// memory: thread pairs share a row (lane / 2), one 64-dim half each (lane %
// 2), as the Hopper consumer's quantise_q. Rows past `rows` are zeros (scale
// 0, codes 0: finite scores, never stored). Returns the row's scale.
__device__ float quantise_q(const KvI8sFwdParams& p, uint32_t q8, int64_t row0, int64_t head,
                            int warp, int lane) {
  constexpr int kHalf = T::kHeadDim / 2;
  const int r = warp * T::kWarpRows + lane / 2, half = lane % 2;
  const int64_t row = row0 + r;
  float x[kHalf];
  const uint4* src =
      reinterpret_cast<const uint4*>(p.q + (row < p.rows ? row : 0) * p.ldq + head * T::kHeadDim) +
      half * (kHalf / 8);
#pragma unroll
  for (int c = 0; c < kHalf / 8; ++c) {
    const uint4 v = row < p.rows ? __ldg(src + c) : make_uint4(0, 0, 0, 0);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      x[8 * c + 2 * i] = __uint_as_float(w[i] << 16);
      x[8 * c + 2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
  bool usable;
  const float scale = TileMath::q_row_scale(x, usable);
#pragma unroll
  for (int c = 0; c < kHalf / 16; ++c) {  // 16 codes: one 16-byte chunk
    uint32_t w[4];
    TileMath::q_codes(x, scale, usable, c, w);
    const uint32_t chunk = uint32_t(half * (kHalf / 16) + c);
    asm volatile(
        "st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(q8 + swizzled(uint32_t(r), chunk)),
        "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
        : "memory");
  }
  return scale;
}

// The n8 block of C at registers 4n.. of a flat accumulator.
template <class R, int kN>
__device__ __forceinline__ auto block(R (&c)[kN], int n) -> R (&)[4] {
  return *reinterpret_cast<R(*)[4]>(&c[4 * n]);
}

#endif

__global__ void __launch_bounds__(T::kThreads, 1)
    attn_fwd_i8s_m128n128_sm89(const KvI8sFwdParams p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t base = (arch::smem_addr(smem_raw) + T::kAtomBytes - 1) & ~(T::kAtomBytes - 1);
  const uint32_t q8 = base + T::kQ8Offset;
  auto k_stage = [&](int t) {
    return base + T::kKOffset + uint32_t(t % T::kStages) * T::kKStageBytes;
  };
  auto v_stage = [&](int t) {
    return base + T::kVOffset + uint32_t(t % T::kStages) * T::kVStageBytes;
  };

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t row0 = int64_t(blockIdx.x) * T::kBlockM;
  const int64_t head = blockIdx.y;
  const int n_tiles = int((p.key_end - p.key_begin + T::kBlockN - 1) / T::kBlockN);
  const int last_keys = int(p.key_end - p.key_begin - int64_t(n_tiles - 1) * T::kBlockN);

  // Tile 0 loads while this warp quantises its rows of Q.
  load_tile(p, k_stage(0), v_stage(0), p.key_begin);
  arch::cp_async_commit();
  const float scale = quantise_q(p, q8, row0, head, warp, lane);
  // Rows g and g + 8 (the C layout) were quantised by lanes 2g and 2g + 16.
  const int g = lane / 4;
  const float q_scale[OnlineSoftmax::kRows] = {__shfl_sync(0xffffffffu, scale, 2 * g),
                                               __shfl_sync(0xffffffffu, scale, 2 * g + 16)};
  __syncwarp();
  // Q8's A fragments, one x4 ldmatrix a k32 step: matrices (rows +0, chunk
  // +0), (rows +8, +0), (rows +0, +1), (rows +8, +1) are a0..a3. A step's
  // chunks are 2kk and 2kk + 1, so its address is step 0's with kk in bits
  // 5-6 flipped. Read again every tile (2 KiB a warp beside K's 17): kept in
  // registers across the key loop, their 16 made the kernel spill.
  const uint32_t q_lane =
      q8 + swizzled(uint32_t(warp * T::kWarpRows + lane % 8 + 8 * ((lane / 8) % 2)),
                    uint32_t(lane / 16));
  // K's (keys) and V^T's (channels) B fragments: matrices (rows +0, chunk +0),
  // (rows +0, +1), (rows +8, +0), (rows +8, +1) are b0, b1 of the n8 block,
  // then of the next one.
  const uint32_t b_lane = swizzled(uint32_t((lane / 16) * 8 + lane % 8), uint32_t((lane / 8) % 2));
  constexpr uint32_t kPairBytes = 2 * T::kMmaN * T::kRowBytes;  // two n8 blocks of rows

  const TileMath math{0, lane};
  // The state's two ends, built where each is used: nothing of them stays
  // live across the key loop (as the Hopper consumer's; the indices read
  // with volatile asm so the compiler cannot keep the first one's rows).
  auto ends = [&] {
    uint32_t tid_x, block_x, block_y;
    asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_x));
    asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(block_x));
    asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(block_y));
    const int l = int(tid_x % 32), w = int(tid_x / 32);
    return AttnWsEpilogue<T>{int64_t(block_x) * T::kBlockM + w * T::kWarpRows + l / 4,
                             int64_t(block_y), 2 * (l % 4), l % 4 == 0};
  };
  const StateEnds state{p.rows, p.heads, p.m, p.l, p.acc, nullptr, 0, false};
  OnlineSoftmax st;
  float acc[T::kAccRegs];
  ends().load(state, st, acc);

  for (int t = 0; t < n_tiles; ++t) {
    // Prefetch the next tile into the other stage (freed by the barrier that
    // ended the previous iteration); always commit, so the wait counts the
    // same groups on the last tile.
    if (t + 1 < n_tiles)
      load_tile(p, k_stage(t + 1), v_stage(t + 1), p.key_begin + int64_t(t + 1) * T::kBlockN);
    arch::cp_async_commit();
    arch::cp_async_wait<1>();
    __syncthreads();
    const uint32_t ks = k_stage(t), vs = v_stage(t);

    // S = Q8 [K; digits]^T, each block over the head dims in order: exact
    // int32 (the order of the blocks changes no bit). Q's four k32 fragments
    // are read once a tile, K's a block pair at a time.
    uint32_t qa[T::kQkSteps][4];
#pragma unroll
    for (int kk = 0; kk < T::kQkSteps; ++kk)
      arch::ldmatrix_x4(qa[kk], q_lane ^ (uint32_t(kk) << 5));
    int32_t s[T::kSRegs];
#pragma unroll
    for (int i = 0; i < T::kSRegs; ++i) s[i] = 0;
#pragma unroll
    for (int j = 0; j < T::kKeyBlocks / 2; ++j) {
#pragma unroll
      for (int kk = 0; kk < T::kQkSteps; ++kk) {
        uint32_t b[4];
        arch::ldmatrix_x4(b, ks + (b_lane ^ (uint32_t(kk) << 5)) + uint32_t(j) * kPairBytes);
        const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
        arch::mma_s8_m16n8k32(block(s, 2 * j), qa[kk], b0);
        arch::mma_s8_m16n8k32(block(s, 2 * j + 1), qa[kk], b1);
      }
    }
#pragma unroll
    for (int kk = 0; kk < T::kQkSteps; ++kk) {
      uint32_t d[2];
      arch::ldmatrix_x2(d, ks + (b_lane ^ (uint32_t(kk) << 5)) + T::kKCodeBytes);
      arch::mma_s8_m16n8k32(block(s, T::kKeyBlocks), qa[kk], d);
    }

    // The softmax of the tile (the last one's keys past key_end masked),
    // P as e4m3 A fragments.
    float pr[T::kKeyBlocks][4];
    float alpha[OnlineSoftmax::kRows];
    math.probs(s, ks + T::kKCodeBytes, q_scale, t == n_tiles - 1 ? last_keys : T::kBlockN, st, pr,
               alpha);
    uint32_t pa[T::kPvSteps][4];
    TileMath::pack_probs(pr, pa);

    // O_t = P V^T over the tile's keys in order, from zero, then the fold:
    // in two halves of channels (32 accumulators live, not 64: the
    // registers the loop needs without spilling).
    constexpr int kHalfBlocks = T::kOBlocks / 2;
    auto pv_half = [&](auto half) {
      constexpr int kJ0 = decltype(half)::value * kHalfBlocks;
      float o[4 * kHalfBlocks];
#pragma unroll
      for (int i = 0; i < 4 * kHalfBlocks; ++i) o[i] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < T::kPvSteps; ++kk) {
        const uint32_t lane_step = b_lane ^ (uint32_t(kk) << 5);
#pragma unroll
        for (int j = 0; j < kHalfBlocks / 2; ++j) {
          uint32_t b[4];
          arch::ldmatrix_x4(b, vs + lane_step + uint32_t(kJ0 / 2 + j) * kPairBytes);
          const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
          arch::mma_e4m3_m16n8k32(block(o, 2 * j), pa[kk], b0);
          arch::mma_e4m3_m16n8k32(block(o, 2 * j + 1), pa[kk], b1);
        }
      }
      math.template fold<kJ0, kJ0 + kHalfBlocks>(acc, o, vs + T::kVCodeBytes, alpha, st);
    };
    pv_half(std::integral_constant<int, 0>{});
    pv_half(std::integral_constant<int, 1>{});
    // Every warp is done with this stage before the next iteration refills it.
    __syncthreads();
  }
  arch::cp_async_wait<0>();  // only empty groups can be pending here
  ends().store(state, st, acc);
#else
  (void)p;
  __trap();  // never launched: the dispatcher selects this kernel on sm_89+ only
#endif
}

}  // namespace

void attention_fwd_kvi8s_sm89(const KvI8sFwdParams& p, cudaStream_t s) {
  // > 48 KiB of dynamic shared memory needs the opt-in (per device: set on
  // every launch, a cheap attribute write).
  cudaFuncSetAttribute(attn_fwd_i8s_m128n128_sm89, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(T::kSmemBytes));
  const dim3 grid(unsigned((p.rows + T::kBlockM - 1) / T::kBlockM), unsigned(p.heads));
  attn_fwd_i8s_m128n128_sm89<<<grid, T::kThreads, T::kSmemBytes, s>>>(p);
  check_launch("attn_fwd_i8s_m128n128_sm89");
}

}  // namespace h3s::cuda::attn
