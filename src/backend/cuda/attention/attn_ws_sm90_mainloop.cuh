// A consumer warpgroup of the warp-specialised attention: 64 query rows
// against every key tile of [key_begin, key_end), in order. Per tile t
// (FlashAttention-3's intra-warpgroup overlap):
//
//   wait K[t]          take the tensor cores (ping-pong barrier)
//   issue S_t = Q K_t^T                          (async, 8 x m64n128k16)
//   O *= alpha_{t-1}   (while S_t runs)
//   wait V[t-1]; issue O += P_{t-1} V_{t-1}      (async, 8 x m64n128k16)
//   hand the tensor cores to the other warpgroup
//   wait S_t; release K[t]; softmax of S_t -> alpha_t (while PV runs)
//   wait PV; release V[t-1]; P_t = bf16(probabilities)
//
// The arithmetic per row is the single-pass kernel's: O is rescaled by
// alpha_t after P_{t-1} V_{t-1} and before P_t V_t, S (raw q.k) is folded
// into (m, l) once per tile with the scale in the exponent (attn_state.cuh).
//
// The kvi8r kernel (attn_fwd_i8r_sm90.cu) runs this consumer over its own
// shared-memory layout (K and V dequantised to fp16 by its producer) with
// fp16 operands: Q converted in place once, P rounded to fp16. The exact
// kernel's traits keep bf16.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/mma_sm80.cuh"
#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/attention/attn_state.cuh"
#include "backend/cuda/attention/attn_ws_sm90_epilogue.cuh"
#include "backend/cuda/attention/attn_ws_sm90_params.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"
#include "backend/cuda/attention/attn_ws_sm90_smem.cuh"

namespace h3s::cuda::attn {

template <class T>
struct AttnWsConsumer {
  using Scores = float[T::kSRegs];
  using Acc = float[T::kAccRegs];
  using Probs = uint32_t[T::kPvSteps][4];  // P as 16-bit pairs, A fragments per k16 step

  int consumer;  // 0 or 1: which 64 rows of the CTA's block
  int col;       // 2 * (lane % 4)

  // Ping-pong: wait for the tensor cores, then pass them on.
  __device__ void take_tensor_cores() const {
    if constexpr (T::kPingPong)
      arch::named_bar_sync(T::kSchedBarrierBase + consumer, T::kSchedBarrierThreads);
  }
  __device__ void pass_tensor_cores() const {
    if constexpr (T::kPingPong)
      arch::named_bar_arrive(T::kSchedBarrierBase + (1 - consumer), T::kSchedBarrierThreads);
  }

  // S = Q K^T over the head dims in order (k16 steps along each 128-byte
  // half). Q: this group's 64 rows, K: the stage's 128 keys, both K-major;
  // 8-row swizzle atoms are 1024 bytes apart (SBO), a k16 step is 32 bytes.
  __device__ static void issue_qk(Scores& s, uint32_t q_rows, uint32_t k_tile) {
    constexpr uint32_t kStepBytes = T::kMmaK * T::kElemBytes;
#pragma unroll
    for (int i = 0; i < T::kSRegs; ++i) wgmma::fence_operand(s[i]);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < T::kQkSteps; ++kk) {
      const uint32_t half = uint32_t(kk / T::kStepsPerHalf);
      const uint32_t step = uint32_t(kk % T::kStepsPerHalf) * kStepBytes;
      const uint64_t da =
          wgmma::make_desc(q_rows + half * T::kQHalfBytes + step, 0, wgmma::kAtomBytes);
      const uint64_t db =
          wgmma::make_desc(k_tile + half * T::kKvHalfBytes + step, 0, wgmma::kAtomBytes);
      wgmma::mma_m64n128k16_ss<T::kOperand>(s, da, db, kk > 0);
    }
    wgmma::commit();
#pragma unroll
    for (int i = 0; i < T::kSRegs; ++i) wgmma::fence_operand(s[i]);
  }

  // O += P V over the tile's keys in order. V is B MN-major (dims
  // contiguous): a k16 step is 16 keys = two atoms; the second 64 dims are
  // the other half (LBO).
  __device__ static void issue_pv(Acc& acc, const Probs& pa, uint32_t v_tile) {
#pragma unroll
    for (int i = 0; i < T::kAccRegs; ++i) wgmma::fence_operand(acc[i]);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < T::kPvSteps; ++kk) {
      const uint64_t db = wgmma::make_desc(v_tile + uint32_t(kk) * 2 * wgmma::kAtomBytes,
                                           T::kKvHalfBytes, wgmma::kAtomBytes);
      wgmma::mma_m64n128k16_rs_tnspb<T::kOperand>(acc, pa[kk], db);
    }
    wgmma::commit();
#pragma unroll
    for (int i = 0; i < T::kAccRegs; ++i) wgmma::fence_operand(acc[i]);
  }

  // Masks the tile's raw scores past key_end (uniform per tile: only a
  // call's last tile is partial) and folds the tile into the state (the
  // scale rides on the exponent's fma, as in the reference); s then holds
  // the probabilities.
  __device__ void softmax(Scores& s, int64_t key0, int64_t key_end, OnlineSoftmax& st,
                          float (&alpha)[OnlineSoftmax::kRows]) const {
    float(&sc)[T::kSBlocks][4] = *reinterpret_cast<float(*)[T::kSBlocks][4]>(&s);
    if (key0 + T::kBlockN > key_end) {
      const int valid_keys = int(key_end - key0);
#pragma unroll
      for (int n = 0; n < T::kSBlocks; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (n * 8 + col + i % 2 >= valid_keys) sc[n][i] = -kInf;
    }
    st.consume(sc, alpha);
  }

  // P's k16 step kk is score blocks 2kk and 2kk + 1 rounded to the operand
  // type (the accumulator layout of S is the A-fragment layout of P).
  __device__ static void pack_probs(const Scores& s, Probs& pa) {
#pragma unroll
    for (int kk = 0; kk < T::kPvSteps; ++kk) {
      const float* b0 = s + 8 * kk;  // score block 2kk: 4 registers, then block 2kk + 1
      auto pack = [](float lo, float hi) {
        if constexpr (T::kOperand == wgmma::Operand16::f16) {
          uint32_t r;
          asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
          return r;
        } else {
          return arch::pack_bf16x2(lo, hi);
        }
      };
      pa[kk][0] = pack(b0[0], b0[1]);
      pa[kk][1] = pack(b0[2], b0[3]);
      pa[kk][2] = pack(b0[4], b0[5]);
      pa[kk][3] = pack(b0[6], b0[7]);
    }
  }

  // f16 operands: this warpgroup's 64 Q rows (both 64-dim halves) from bf16
  // to fp16 in place, made visible to wgmma (async proxy) and to the whole
  // warpgroup before its first MMA.
  __device__ void q_to_f16(uint32_t q_rows, int tid) const {
    constexpr int kWords = T::kGroupRows * wgmma::kSwizzleBytes / 4;  // per half
#pragma unroll
    for (int h = 0; h < T::kHalves; ++h)
#pragma unroll 4
      for (int i = tid; i < kWords; i += arch::kWarpGroupThreads) {
        const uint32_t a = q_rows + uint32_t(h) * T::kQHalfBytes + uint32_t(i) * 4;
        uint32_t v;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(a));
        const float lo = __uint_as_float(v << 16), hi = __uint_as_float(v & 0xffff0000u);
        asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(v) : "f"(hi), "f"(lo));
        asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(v) : "memory");
      }
    wgmma::fence_proxy_async_smem();
    arch::named_bar_sync(T::kQConvertBarrierBase + consumer, arch::kWarpGroupThreads);
  }

  // After a wgmma wait: keeps the compiler from reading the registers an
  // async MMA writes before the wait that completes it.
  template <int kN>
  __device__ static void settle(float (&r)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) wgmma::fence_operand(r[i]);
  }

  // O *= alpha, skipped (the same bits) where the warp's rows all kept their max.
  __device__ static void rescale(Acc& acc, const float (&alpha)[OnlineSoftmax::kRows]) {
    if (warp_keeps_max(alpha)) return;
#pragma unroll
    for (int i = 0; i < T::kAccRegs; ++i) acc[i] = __fmul_rn(acc[i], alpha[(i % 4) / 2]);
  }

  // Smem: AttnWsSmem<T>, or any layout with the same Q, K/V ring and barrier
  // accessors (AttnI8rSmem).
  template <class Smem>
  __device__ void run(const AttnWsParams& p, const Smem& smem, AttnWsTile tile, int n_tiles) const {
    const int tid = int(threadIdx.x) % arch::kWarpGroupThreads;
    const int warp = tid / 32, lane = tid % 32;
    const AttnWsEpilogue<T> ends{tile.row0 + consumer * T::kGroupRows + warp * 16 + lane / 4,
                                 tile.head, col, lane % 4 == 0};
    OnlineSoftmax st;
    Acc acc;
    ends.load(p, st, acc);
    const uint32_t q_rows = smem.q() + uint32_t(consumer * T::kGroupRows * wgmma::kSwizzleBytes);
    if (T::kPingPong && consumer == 1) pass_tensor_cores();  // consumer 0 goes first

    Scores s;
    Probs pa;
    float alpha[OnlineSoftmax::kRows];
    arch::mbar_wait(smem.q_full(), 0);
    if constexpr (T::kOperand == wgmma::Operand16::f16) q_to_f16(q_rows, tid);

    // Tile 0: S only.
    arch::mbar_wait(smem.k_full(0), 0);
    take_tensor_cores();
    issue_qk(s, q_rows, smem.k(0));
    pass_tensor_cores();
    wgmma::wait<0>();
    settle(s);
    arch::mbar_arrive(smem.k_empty(0));
    softmax(s, p.key_begin, p.key_end, st, alpha);
    pack_probs(s, pa);

    for (int t = 1; t < n_tiles; ++t) {
      const int stage = t % T::kStages, prev = (t - 1) % T::kStages;
      const uint32_t parity = uint32_t((t / T::kStages) & 1);
      const uint32_t prev_parity = uint32_t(((t - 1) / T::kStages) & 1);
      arch::mbar_wait(smem.k_full(stage), parity);
      take_tensor_cores();
      issue_qk(s, q_rows, smem.k(stage));
      rescale(acc, alpha);
      arch::mbar_wait(smem.v_full(prev), prev_parity);
      issue_pv(acc, pa, smem.v(prev));
      pass_tensor_cores();
      wgmma::wait<1>();  // S_t (committed first) is done
      settle(s);
      arch::mbar_arrive(smem.k_empty(stage));
      softmax(s, p.key_begin + int64_t(t) * T::kBlockN, p.key_end, st, alpha);
      wgmma::wait<0>();  // P_{t-1} V_{t-1} is done: pa and V's stage are free
      settle(acc);
      arch::mbar_arrive(smem.v_empty(prev));
      pack_probs(s, pa);
    }

    // The last tile's P V.
    const int last = (n_tiles - 1) % T::kStages;
    rescale(acc, alpha);
    arch::mbar_wait(smem.v_full(last), uint32_t(((n_tiles - 1) / T::kStages) & 1));
    take_tensor_cores();
    issue_pv(acc, pa, smem.v(last));
    pass_tensor_cores();
    wgmma::wait<0>();
    settle(acc);
    arch::mbar_arrive(smem.v_empty(last));

    ends.store(p, st, acc);
    // Consumer 1's last hand-over arrived on consumer 0's barrier; absorb it
    // so no named barrier is left half-arrived when the CTA exits.
    if (T::kPingPong && consumer == 0) take_tensor_cores();
  }
};

}  // namespace h3s::cuda::attn
