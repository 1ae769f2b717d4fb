// A consumer warpgroup of the kvi8s Hopper attention (attn_fwd_i8s_sm90.cu):
// 64 query rows against every key tile of [key_begin, key_end), in order, as
// kvfmt/kvi8s.hpp defines. FlashAttention-3's intra-warpgroup overlap, per
// tile t:
//
//   wait K[t], V[t-1]
//   issue S_t = Q8 [K_t; digits_t]^T                 (async, 4 x m64n144k32 s8)
//   issue O = P_{t-1} V_{t-1}, P's A fragments from registers (async, 4 x
//     m64n136k32 e4m3: V^T's 128 channels, then 8 rows of ones)
//   wait S_t; the softmax of t while P_{t-1} V_{t-1} is on the tensor cores
//   wait O; P_t packed into the fragments P_{t-1} V_{t-1} has finished
//     reading; fold O_{t-1}; release V[t-1]
//
//   fold: acc = fma(O_j, vs_j, acc * alpha_j), the two levels' sum; each
//     row's sum of the e4m3 P (O's columns 128..135) joins l
//   softmax of t: the row max from the int32 dots (the definition's scores
//     fma(float(dq), qk_b, float(dm_b) * mc_b), in log2 units, are monotone
//     in dq); release K[t]; alpha_t; u = 256 p = 2^(fma(float(dq), qk_b,
//     corr_b + shift)), one fma a score, float(dq) from an integer add;
//     P_t = e4m3(u), packed in the fp8 A-fragment order V^T's keys are
//     stored in
//
// The mma.sync kernel (attn_fwd_i8s_sm89.cu) runs this consumer's Q
// quantiser, softmax, P packing and fold on its own tiles, with T::kSumOnTc
// false: l from the fp32 p, summed in kChains chains.
//
// The max and m are the CPU's bits: the int32 dots are exact and the fp32
// steps the same IEEE operations. What differs from the definition is
// ex2.approx (alpha and p), the rounding of the exponent's argument (the fused fma, the
// shift by 2^8 inside it), the order of the softmax's sum and of P V's fp32
// sums: bounded by the GPU test.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mbarrier.cuh"
#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/arch/wgmma_i8f8.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_params.cuh"
#include "backend/cuda/attention/attn_i8s_sm90_smem.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/attention/attn_state.cuh"
#include "backend/cuda/attention/attn_ws_sm90_epilogue.cuh"
#include "backend/cuda/attention/attn_ws_sm90_scheduler.cuh"
#include "kvfmt/kvi8s.hpp"

namespace h3s::cuda::attn {

// Four e4m3 bytes, b0 lowest (cvt puts its first source in the upper byte).
__device__ __forceinline__ uint32_t pack_e4m3x4(float b0, float b1, float b2, float b3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(b0), "f"(b1), "f"(b2), "f"(b3));
  return r;
}

template <class T>
struct AttnI8sConsumer {
  using Scores = int32_t[T::kSRegs];
  using Probs = float[T::kKeyBlocks][4];
  using Acc = float[T::kAccRegs];
  using PvAcc = float[T::kPvRegs];         // P V (kSumOnTc: and the row sums past O's columns)
  using PFrag = uint32_t[T::kPvSteps][4];  // P as e4m3, A fragments per k32 step
  static constexpr int kRows = OnlineSoftmax::kRows;
  static constexpr int kBlocks = kvi8s::kBlocksPerTile;
  // Independent chains of the softmax's sum of the fp32 p (!T::kSumOnTc).
  static constexpr int kChains = 4;

  int consumer;  // 0 or 1: which 64 rows of the CTA's block
  int lane;

  // This thread is done with a K or V stage (its reads and its warpgroup's
  // MMAs from it).
  __device__ static void release(uint32_t empty_bar) { arch::mbar_arrive(empty_bar); }

  template <class R, int kN>
  __device__ static void settle(R (&r)[kN]) {
#pragma unroll
    for (int i = 0; i < kN; ++i) wgmma::fence_operand(r[i]);
  }

  // Q's quantiser (kvi8s::quantise_q_row's IEEE steps) on one 64-dim half
  // of a rotated query row, bf16 as fp32; thread pairs share a row (the
  // other half is lane ^ 1's). The mma.sync kernel (attn_fwd_i8s_sm89.cu)
  // shares both steps. q_row_scale: the row's scale (stored as it is) and
  // whether it is usable (not 0, finite: else every code is 0).
  __device__ static float q_row_scale(const float (&x)[T::kHeadDim / 2], bool& usable) {
    float amax = 0.0f;
#pragma unroll
    for (int d = 0; d < T::kHeadDim / 2; ++d) amax = fmaxf(amax, fabsf(x[d]));
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
    const float scale =
        __fmul_rn(__fdiv_rn(amax, float(kvi8s::kMaxCode)), 1.0f + 0x1p-7f);  // int8_scale
    usable = scale > 0.0f && isfinite(scale);
    return scale;
  }
  // The codes of the half's 16-dim chunk c, four a word in dim order.
  __device__ static void q_codes(const float (&x)[T::kHeadDim / 2], float scale, bool usable, int c,
                                 uint32_t (&w)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t word = 0;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float q = usable ? rintf(__fdiv_rn(x[16 * c + 4 * i + b], scale)) : 0.0f;
        const int code = fabsf(q) <= float(kvi8s::kMaxCode) ? int(q) : 0;
        word |= (uint32_t(code) & 0xffu) << (8 * b);
      }
      w[i] = word;
    }
  }

  // Q' (bf16 in the TMA's swizzled halves) -> int8 codes in this group's
  // swizzled Q8 tile and one fp32 scale per row. Thread pairs share a row,
  // one 64-dim half each.
  __device__ void quantise_q(const AttnI8sSmem<T>& smem, int tid) const {
    const int r = tid / 2, half = tid % 2;  // r: row in the group
    const uint32_t row = uint32_t(consumer * T::kGroupRows + r);
    const uint32_t src = smem.q() + uint32_t(half) * T::kQHalfBytes + row * wgmma::kSwizzleBytes;
    float x[T::kHalfDims];
#pragma unroll
    for (int c = 0; c < T::kHalfDims / 8; ++c) {
      uint32_t w[4];
      asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                   : "r"(src + ((uint32_t(c) ^ (row % 8)) * 16)));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        x[8 * c + 2 * i] = __uint_as_float(w[i] << 16);
        x[8 * c + 2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
      }
    }
    bool usable;
    const float scale = q_row_scale(x, usable);
    const uint32_t dst = smem.q8(consumer) + uint32_t(r) * T::kRowBytes;
#pragma unroll
    for (int c = 0; c < T::kHalfDims / 16; ++c) {  // 16 codes: one 16-byte chunk
      uint32_t w[4];
      q_codes(x, scale, usable, c, w);
      const uint32_t chunk = uint32_t(half * (T::kHalfDims / 16) + c);
      asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(
                       dst + ((chunk ^ (uint32_t(r) % 8)) * 16)),
                   "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                   : "memory");
    }
    if (half == 0) {
      asm volatile("st.shared.f32 [%0], %1;" ::"r"(smem.q_scale(int(row))), "f"(scale) : "memory");
    }
    wgmma::fence_proxy_async_smem();
    arch::named_bar_sync(T::kQReadyBarrierBase + consumer, arch::kWarpGroupThreads);
  }

  // The MMAs, from descriptors built once before the key loop (measured:
  // the same speed as building them per MMA, fewer instructions). A
  // descriptor `bytes` further on: the start address is its low 14 bits in
  // 16-byte units and shared memory ends below 2^18 bytes, so the add never
  // carries out of the low word.
  __device__ static uint64_t desc_at(uint64_t desc, uint32_t bytes) {
    return (desc & ~uint64_t(0xffffffffu)) | uint32_t(uint32_t(desc) + (bytes >> 4));
  }
  // S = Q8 [K; digits]^T over the head dims in order (k32 steps of 32 bytes
  // along the 128-byte rows; 8-row atoms 1024 bytes apart).
  __device__ static void issue_qk(Scores& s, uint64_t q8_desc, uint64_t k_desc) {
    settle(s);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < T::kQkSteps; ++kk) {
      const uint32_t step = uint32_t(kk * T::kMmaK);
      wgmma::mma_m64n144k32_s8_ss(s, desc_at(q8_desc, step), desc_at(k_desc, step), kk > 0);
    }
    wgmma::commit();
    settle(s);
  }
  // O = P V^T over the tile's keys (k32 steps of 32 keys along V^T's rows),
  // into a fresh accumulator, P's A fragments from registers: m64n136 over
  // the ones rows too (O's columns 128..135: the row sums).
  __device__ static void issue_pv(PvAcc& o, const PFrag& pa, uint64_t v_desc) {
    settle(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < T::kPvSteps; ++kk)
      wgmma::mma_m64n136k32_e4m3_rs(o, pa[kk], desc_at(v_desc, uint32_t(kk * T::kMmaK)), kk > 0);
    wgmma::commit();
    settle(o);
  }

  // An fp32 the header holds at (header row, index) in a stage whose rows
  // TMA wrote 128-byte swizzled from an atom's first row.
  __device__ static uint32_t header_addr(uint32_t rows, int row, int index) {
    const uint32_t byte = uint32_t(index) * 4;
    return rows + uint32_t(row) * wgmma::kSwizzleBytes +
           (((byte / 16) ^ (uint32_t(row) % 8)) * 16) + byte % 16;
  }

  // Per row and K block of a tile, the two factors of kvi8s.hpp's score
  // fma(float(dq), qk_b, corr_b), in log2 units: qk_b = q_scale k_scale_b c
  // and corr_b = float(q_code . mean_b) q_scale m_scale_b c, c =
  // kScoreLog2Scale.
  struct TileScale {
    float qk[kRows][kBlocks];
    float corr[kRows][kBlocks];
  };
  __device__ TileScale tile_scale(const Scores& s, uint32_t k_header,
                                  const float (&q_scale)[kRows]) const {
    float sc[4];  // k_scale[0], k_scale[1], m_scale[0], m_scale[1]
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(sc[0]), "=f"(sc[1]), "=f"(sc[2]), "=f"(sc[3])
                 : "r"(header_addr(k_header, kvi8s::kRowScales, 0)));
    // q_code . (256 hi_b + lo_b): columns kBlockN + 2b and + 2b + 1, held by
    // the quad's lane b (registers 4 * kKeyBlocks + {0, 1} for row g, + {2,
    // 3} for row g + 8).
    constexpr int kDigitReg = 4 * T::kKeyBlocks;
    const int32_t mine[kRows] = {256 * s[kDigitReg] + s[kDigitReg + 1],
                                 256 * s[kDigitReg + 2] + s[kDigitReg + 3]};
    const int quad = lane & ~3;
    constexpr float c = AttnScale::kScoreLog2Scale;
    TileScale ts;
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) {
        const int32_t dm = __shfl_sync(0xffffffffu, mine[r], quad + b);
        ts.qk[r][b] = __fmul_rn(__fmul_rn(q_scale[r], sc[b]), c);
        ts.corr[r][b] = __fmul_rn(float(dm), __fmul_rn(__fmul_rn(q_scale[r], sc[kBlocks + b]), c));
      }
    return ts;
  }

  static constexpr int kBlocksPerKBlock = int(kvi8s::kBlock) / 8;  // n8 score blocks per K block

  // Per row, the max of this thread's scores of a full tile. A score is
  // fma(float(dq), qk_b, corr_b) with qk_b >= 0, and a rounded fma does not
  // decrease as dq grows, so the largest score of a block is the one of its
  // largest dq: the max comes from the int32 dots (three-way DPX max)
  // without waiting for the conversions.
  __device__ static void int_max(const Scores& s, const TileScale& ts, float (&thread_max)[kRows]) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float block_max[kBlocks];
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) {
        const int n0 = b * kBlocksPerKBlock;
        int32_t m = s[4 * n0 + 2 * r];
#pragma unroll
        for (int n = n0; n < n0 + kBlocksPerKBlock; ++n)
          m = __vimax3_s32(m, s[4 * n + 2 * r], s[4 * n + 2 * r + 1]);
        block_max[b] = __fmaf_rn(__int2float_rn(m), ts.qk[r][b], ts.corr[r][b]);
      }
      thread_max[r] = fmaxf(block_max[0], block_max[1]);
    }
  }

  // The scores of a tile whose keys past valid_keys (only a call's last
  // tile has any) are -inf, and per row the max of this thread's.
  __device__ void masked_scores(const Scores& s, const TileScale& ts, int valid_keys, Probs& p,
                                float (&thread_max)[kRows]) const {
    const int col = 2 * (lane % 4);
#pragma unroll
    for (int r = 0; r < kRows; ++r) thread_max[r] = -kInf;
#pragma unroll
    for (int n = 0; n < T::kKeyBlocks; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = i / 2, b = n / kBlocksPerKBlock;
        p[n][i] = n * 8 + col + i % 2 < valid_keys
                      ? __fmaf_rn(__int2float_rn(s[4 * n + i]), ts.qk[r][b], ts.corr[r][b])
                      : -kInf;
        thread_max[r] = fmaxf(thread_max[r], p[n][i]);
      }
  }

  // The tile's 2^8 p straight from S with the online softmax's step around
  // them: the max from the int32 dots (int_max: the definition's log2
  // units), then p = 2^(fma(float(dq), qk_b, corr_b + shift)), one fma a
  // score where the definition's score and exponent take two (the rounding
  // of the exponent's argument differs by an ulp or so; the GPU test bounds
  // it). The masked last tile keeps the two-step form (masked_scores, then
  // the online softmax's consume_with_max).
  __device__ void probs(const Scores& s, uint32_t k_header, const float (&q_scale)[kRows],
                        int valid_keys, OnlineSoftmax& st, Probs& p, float (&alpha)[kRows]) const {
    const TileScale ts = tile_scale(s, k_header, q_scale);
    float thread_max[kRows], shift[kRows];
    if (valid_keys < T::kBlockN) {
      masked_scores(s, ts, valid_keys, p, thread_max);
      st.consume_with_max<T::kKeyBlocks, T::kLog2PScale, kChains, !T::kSumOnTc, ScoreUnits::log2>(
          p, thread_max, alpha);
      return;
    }
    int_max(s, ts, thread_max);
    st.begin_tile<T::kLog2PScale, !T::kSumOnTc, ScoreUnits::log2>(thread_max, alpha, shift);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float corr2[kBlocks];
      // float(dq) = asfloat(dq + bits(1.5 * 2^23)) - 1.5 * 2^23 exactly, on
      // the integer pipe instead of I2FP; the constant moves into the addend
      // (one more rounding, of <= 0.75 qk_b in the exponent: it flips an e4m3
      // P now and then, 1.2e-3 rel-rms from the definition against 4.7e-4
      // without; the error against the exact store unchanged,
      // docs/PERFORMANCE.md).
      constexpr float kMagic = 12582912.0f;
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) {
        corr2[b] = __fadd_rn(ts.corr[r][b], shift[r]);
        corr2[b] = __fmaf_rn(-kMagic, ts.qk[r][b], corr2[b]);
      }
      float chain_sum[kChains] = {};
#pragma unroll
      for (int n = 0; n < T::kKeyBlocks; ++n)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int b = n / kBlocksPerKBlock;
          const float dq = __int_as_float(s[4 * n + 2 * r + j] + 0x4B400000);
          p[n][2 * r + j] = ex2(__fmaf_rn(dq, ts.qk[r][b], corr2[b]));
          if constexpr (!T::kSumOnTc)
            chain_sum[n % kChains] = __fadd_rn(chain_sum[n % kChains], p[n][2 * r + j]);
        }
      if constexpr (!T::kSumOnTc) {
        float sum = chain_sum[0];
#pragma unroll
        for (int c = 1; c < kChains; ++c) sum = __fadd_rn(sum, chain_sum[c]);
        st.end_tile<T::kLog2PScale>(r, sum);
      }
    }
  }

  // acc = fma(O, vs, acc * alpha) per element, vs the tile's channel scales
  // from the V stage's header rows (column 8j + col + {0, 1}: one 8-byte
  // load). Channel 8j + 2t sits in row R = j / 4, 16-byte chunk 2 (j % 4) +
  // t / 2 swizzled by R: with R a constant, the lane's part of the address
  // is one of two values (R even or odd) and the rest is an immediate.
  // O's n8 blocks [kJ0, kJ1) (o holds them from its register 0: the
  // mma.sync kernel folds its P V in two halves of channels).
  template <bool kRescale, int kJ0 = 0, int kJ1 = T::kOBlocks, int kN>
  __device__ void fold_tile(Acc& acc, const float (&o)[kN], uint32_t v_header,
                            const float (&alpha)[kRows]) const {
    static_assert(0 <= kJ0 && kJ0 < kJ1 && kJ1 <= T::kOBlocks && 4 * (kJ1 - kJ0) <= kN,
                  "o holds the blocks folded");
    const uint32_t t = uint32_t(lane % 4), half = t / 2, word = 8 * (t % 2);
    const uint32_t lane_base[2] = {v_header + 16 * half + word, v_header + 16 * (half ^ 1) + word};
#pragma unroll
    for (int j = kJ0; j < kJ1; ++j) {
      constexpr uint32_t kRowFloats = wgmma::kSwizzleBytes / 4;
      const uint32_t row = uint32_t(8 * j) / kRowFloats;
      const uint32_t offset = row * wgmma::kSwizzleBytes + 32 * ((uint32_t(j) % 4) ^ (row / 2));
      float vs[2];
      asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];"
                   : "=f"(vs[0]), "=f"(vs[1])
                   : "r"(lane_base[row % 2] + offset));
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float kept = kRescale ? __fmul_rn(acc[4 * j + i], alpha[i / 2]) : acc[4 * j + i];
        acc[4 * j + i] = __fmaf_rn(o[4 * (j - kJ0) + i], vs[i % 2], kept);
      }
    }
  }
  // Most tiles leave every row's max where it was (alpha = 1, and acc * 1 is
  // acc): a warp whose rows all agree skips the multiply, with the same bits.
  // kSumOnTc: the tile's row sums (O's column 128 + 2t for rows g and g + 8:
  // every ones column holds the whole row's) join l here.
  template <int kJ0 = 0, int kJ1 = T::kOBlocks, int kN>
  __device__ void fold(Acc& acc, const float (&o)[kN], uint32_t v_header,
                       const float (&alpha)[kRows], OnlineSoftmax& st) const {
    if constexpr (T::kSumOnTc) {
      static_assert(kJ0 == 0 && kJ1 == T::kOBlocks, "the row sums join l with the whole O");
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        st.fold_sum<T::kLog2PScale>(r, alpha[r], o[T::kAccRegs + 2 * r]);
    }
    if (warp_keeps_max(alpha))
      fold_tile<false, kJ0, kJ1>(acc, o, v_header, alpha);
    else
      fold_tile<true, kJ0, kJ1>(acc, o, v_header, alpha);
  }

  // P's k32 step kk: score blocks 4kk..4kk+3 as the fp8 A fragment (a0: row
  // g, keys 2t, 2t+1, 8+2t, 9+2t of the step; a1: row g + 8; a2 / a3: the
  // same 16 keys on), the order kvi8s::v_position stores V^T's keys in.
  __device__ static void pack_probs(const Probs& p, PFrag& pa) {
#pragma unroll
    for (int kk = 0; kk < T::kPvSteps; ++kk) {
      const int n = 4 * kk;
      pa[kk][0] = pack_e4m3x4(p[n][0], p[n][1], p[n + 1][0], p[n + 1][1]);
      pa[kk][1] = pack_e4m3x4(p[n][2], p[n][3], p[n + 1][2], p[n + 1][3]);
      pa[kk][2] = pack_e4m3x4(p[n + 2][0], p[n + 2][1], p[n + 3][0], p[n + 3][1]);
      pa[kk][3] = pack_e4m3x4(p[n + 2][2], p[n + 2][3], p[n + 3][2], p[n + 3][3]);
    }
  }

  __device__ void run(const AttnI8sParams& ps, const AttnI8sSmem<T>& smem, AttnWsTile tile,
                      int n_tiles) const {
    const AttnWsParams& p = ps.base;
    const int tid = int(threadIdx.x) % arch::kWarpGroupThreads;
    const int warp = tid / 32;
    const int group_row = warp * 16 + lane / 4;  // the thread's first row in the group
    // The state's two ends, built where each is used: nothing of them stays
    // live across the key loop (the consumers' registers are all spoken for).
    // (The indices are read with volatile asm so the compiler cannot keep the
    // first one's 64-bit row alive for the second.)
    auto ends = [&] {
      uint32_t tid_x, block_x, block_y;
      asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tid_x));
      asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(block_x));
      asm volatile("mov.u32 %0, %%ctaid.y;" : "=r"(block_y));
      const int l = int(tid_x % 32), row = int(tid_x) % arch::kWarpGroupThreads / 32 * 16 + l / 4;
      return AttnWsEpilogue<T>{int64_t(block_x) * T::kBlockM + consumer * T::kGroupRows + row,
                               int64_t(block_y), 2 * (l % 4), l % 4 == 0};
    };
    OnlineSoftmax st;
    Acc acc;
    ends().load(p, st, acc);

    arch::mbar_wait(smem.q_full(), 0);
    quantise_q(smem, tid);
    const uint32_t q8 = smem.q8(consumer);
    float q_scale[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      asm volatile("ld.shared.f32 %0, [%1];"
                   : "=f"(q_scale[r])
                   : "r"(smem.q_scale(consumer * T::kGroupRows + group_row + 8 * r)));

    Scores s;
    Probs pr;
    PvAcc o;
    PFrag pa;
    float alpha[kRows];  // of the last tile's softmax

    // The MMAs of a ring stage.
    const uint64_t q8_desc = wgmma::make_desc(q8, 0, wgmma::kAtomBytes);
    const uint64_t k_desc = wgmma::make_desc(smem.k(0), 0, wgmma::kAtomBytes);
    const uint64_t v_desc = wgmma::make_desc(smem.v(0), 0, wgmma::kAtomBytes);
    auto qk = [&](int stage) {
      issue_qk(s, q8_desc, desc_at(k_desc, uint32_t(stage) * T::kKStageBytes));
    };
    auto pv = [&](int stage) {
      issue_pv(o, pa, desc_at(v_desc, uint32_t(stage) * T::kVStageBytes));
    };
    // S_t -> P_t (fp32) and the softmax state, alpha for the accumulator.
    auto softmax = [&](int stage, int valid_keys) {
      probs(s, smem.k_header(stage), q_scale, valid_keys, st, pr, alpha);
      release(smem.k_empty(stage));
    };

    // Tile 0: S only.
    arch::mbar_wait(smem.k_full(0), 0);
    qk(0);
    wgmma::wait<0>();
    settle(s);
    // Keys of the last tile (32-bit: the loop keeps no 64-bit key positions).
    const int last_keys = int(p.key_end - p.key_begin - int64_t(n_tiles - 1) * T::kBlockN);
    auto valid = [&](int t) { return t == n_tiles - 1 ? last_keys : T::kBlockN; };

    // S_t goes first and its softmax runs while P_{t-1} V_{t-1} is on the
    // tensor cores; P_t is then packed from the softmax's fp32 into the
    // fragments P_{t-1} V_{t-1} has finished reading (one fragment set: P_t
    // in a second one, packed before the wait, spills and serialises the
    // wgmmas), before the fold of t-1 (with t-1's alpha), so the softmax's
    // fp32 dies before the fold needs registers for the V scales.
    float alpha_p[kRows];  // of the P in the fragments
    float alpha_o[kRows];  // of the P V in o, not folded yet
    auto publish = [&] {
      pack_probs(pr, pa);
#pragma unroll
      for (int r = 0; r < kRows; ++r) alpha_p[r] = alpha[r];
    };
    auto fold_o = [&](int t_o) {  // o holds P_{t_o} V_{t_o}
      const int stage_o = t_o % T::kStages;
      fold(acc, o, smem.v_header(stage_o), alpha_o, st);
      release(smem.v_empty(stage_o));
    };
    softmax(0, valid(0));
    publish();
    for (int t = 1; t < n_tiles; ++t) {
      const int stage = t % T::kStages, prev = (t - 1) % T::kStages;
      const uint32_t parity = uint32_t((t / T::kStages) & 1);
      const uint32_t prev_parity = uint32_t(((t - 1) / T::kStages) & 1);
      arch::mbar_wait(smem.k_full(stage), parity);
      arch::mbar_wait(smem.v_full(prev), prev_parity);
      qk(stage);
      pv(prev);
#pragma unroll
      for (int r = 0; r < kRows; ++r) alpha_o[r] = alpha_p[r];
      wgmma::wait<1>();  // S_t (committed first) is done
      settle(s);
      softmax(stage, valid(t));
      wgmma::wait<0>();  // P_{t-1} V_{t-1} is done: P's fragments are free
      settle(o);
      publish();
      fold_o(t - 1);
    }

    // The last tile's P V.
    const int last = (n_tiles - 1) % T::kStages;
    arch::mbar_wait(smem.v_full(last), uint32_t(((n_tiles - 1) / T::kStages) & 1));
    pv(last);
    wgmma::wait<0>();
    settle(o);
    fold(acc, o, smem.v_header(last), alpha, st);
    release(smem.v_empty(last));

    ends().store(p, st, acc);
  }
};

}  // namespace h3s::cuda::attn
