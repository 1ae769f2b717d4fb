// Design: FlashAttention-2-style forward for head_dim 128, bf16 Q/K/V, fp32
// state, mma.sync m16n8k16 (runs on sm_80+; built for sm_90a). A second
// instance takes fp16 K/V (KvType::f16: kvi8r's decoded K~/V~) with the
// Hopper kvi8r kernel's operands: q' converted to fp16 in registers
// (satfinite), P rounded to fp16; everything else is the same code. Grid
// (ceil(rows / 128), heads); a CTA owns 128 query rows, 4 warps of two m16
// slabs or 8 of one (attn_fwd_traits.cuh says why; kernel_choice.hpp's
// attn_sm80_slabs picks per GPU, the same bits). K/V stream through shared
// memory in 64-key tiles (XOR-swizzled, cp.async double buffer), in increasing
// key order from key_begin, the last tile masked at key_end. Per tile: S = Q K^T
// (fp32), online softmax in log2 units (the scale in the exp2 fma), P rounded
// to bf16, O += P V. The state (m, l, acc) is loaded at CTA start and stored
// at the end, so calls chain over 64-aligned K/V blocks with the single-pass
// bits. Expected limit: FA2 with mma.sync reaches ~350 TFLOP/s on H100-class
// parts (~35% of the bf16 peak); wgmma/TMA (FA3, attn_fwd_sm90) is the
// follow-up.
//
// This file: the mma.sync kernel and its launcher (attn_dispatch.cpp chooses
// it on GPUs other than sm_90), and the state's finish and reset kernels of
// kernels.hpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/arch/mma_sm80.cuh"
#include "backend/cuda/attention/attn_fwd_traits.cuh"
#include "backend/cuda/attention/attn_state.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernel_choice.hpp"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {
namespace attn {
namespace {

using Mma = Mma16816;
// The shared-memory geometry both tiles share (rows of 128 bf16, the swizzle).
using Geom = AttnFwdOneSlab;

static_assert(kScoreLog2Scale == 0x1.0527dcp-3f, "log2(e) / sqrt(128) as the CPU rounds it");

// ---- PTX wrappers (gemm/mma_sm80.cuh) ---------------------------------------

using arch::cp_async_16;
using arch::cp_async_commit;
using arch::cp_async_wait;
using arch::ldmatrix_x4;
using arch::ldmatrix_x4_trans;
using arch::smem_addr;

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  return arch::pack_bf16x2(lo, hi);
}

// The operand type's three differences: P's rounding, the MMA, and Q (read
// as bf16, converted in registers for fp16).
template <KvType kKv>
struct Operands {
  __device__ static uint32_t pack_p(float lo, float hi) {
    if constexpr (kKv == KvType::f16)
      return arch::pack_f16x2(lo, hi);  // P <= 1: no saturation needed
    else
      return arch::pack_bf16x2(lo, hi);
  }
  // c += a * b for one m16n8k16 tile (A row-major, B column-major).
  __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    const uint32_t b[2] = {b0, b1};
    if constexpr (kKv == KvType::f16)
      arch::mma_f16_m16n8k16(c, a, b);
    else
      arch::mma_bf16_m16n8k16(c, a, b);
  }
  // A bf16x2 Q word as the MMA's type: fp16 exact for |q'| in fp16's normal
  // range (H3's queries are RMS-normed), clamped beyond (as the Hopper kvi8r
  // kernel's q_to_f16).
  __device__ static uint32_t q_word(uint32_t bf16x2) {
    if constexpr (kKv == KvType::f16)
      return arch::pack_f16x2<true>(__uint_as_float(bf16x2 << 16),
                                    __uint_as_float(bf16x2 & 0xffff0000u));
    else
      return bf16x2;
  }
};

// ---- shared-memory tiles -------------------------------------------------------

// Byte offset of 16-byte chunk `chunk` of tile row `row` (the swizzle of the
// traits: chunk ^ row % 8).
__device__ __forceinline__ uint32_t swizzled(int row, int chunk) {
  return uint32_t(row * int(Geom::kRowBytes) + ((chunk ^ (row % Geom::kSwizzleRows)) * 16));
}

// ldmatrix addressing. A lane reads chunk c_step + c_lane of tile row
// row_lane + row_step, with c_step even (the k16 / n16 step), c_lane in
// {0, 1} (which half of the step the lane's matrix covers) and row_step a
// multiple of 8. Rows are 256 bytes, so the chunk bits (4..7) of
// row_lane * 256 are zero and the swizzled offset is
//   lane_offset(row_lane, c_lane) ^ (c_step * 16) + row_step * 256,
// one XOR per ldmatrix from an offset computed once per lane (the tile base
// is added after the XOR, so nothing depends on its alignment).
__device__ __forceinline__ uint32_t lane_offset(int row_lane, int c_lane) {
  return swizzled(row_lane, c_lane);
}
__device__ __forceinline__ uint32_t step_addr(uint32_t tile, uint32_t lane_off, int c_step,
                                              int row_step) {
  return tile + (lane_off ^ uint32_t(c_step * 16)) + uint32_t(row_step * int(Geom::kRowBytes));
}
static_assert(Geom::kRowBytes == 256 && Geom::kChunksPerRow == 16 &&
                  AttnFwdTwoSlabs::kRowBytes == Geom::kRowBytes,
              "the XOR addressing assumes 16 chunks of 16 bytes per row (bits 4..7)");

// The Q block (rows split over the CTA as the traits' kRowsPerPass says):
// rows past `rows` are zero-filled, never read, so the tail CTA computes
// finite (unused) values and row r's math never sees them.
template <class T>
__device__ __forceinline__ void load_q_tile(uint32_t sq, const FwdParams& p, int64_t row0,
                                            int64_t head) {
  const int r0 = int(threadIdx.x) / T::kChunksPerRow, c = int(threadIdx.x) % T::kChunksPerRow;
  const uint16_t* base = p.q + row0 * p.ldq + head * T::kHeadDim + c * T::kChunkElems;
  const uint32_t dst = sq + swizzled(r0, c);
#pragma unroll
  for (int i = 0; i < T::kQChunksPerThread; ++i) {
    const int r = r0 + i * T::kRowsPerPass;
    const bool valid = row0 + r < p.rows;
    cp_async_16(dst + uint32_t(i * T::kRowsPerPass) * uint32_t(T::kRowBytes),
                base + (valid ? int64_t(r) * p.ldq : 0), valid);
  }
}

// One K and one V tile of keys [key0, key0 + kBlockN); keys >= key_end are
// zero-filled (V must be finite there: 0 * garbage could be NaN) and their
// source address clamped to the last key, which is in range.
// Key indices and the key stride in 32 bits (the launcher checks they fit):
// one wide multiply per chunk and one register per index.
template <class T>
__device__ __forceinline__ void load_kv_tile(uint32_t sk, uint32_t sv, const uint16_t* kh,
                                             const uint16_t* vh, const FwdParams& p, int key0) {
  const int r0 = int(threadIdx.x) / T::kChunksPerRow, c = int(threadIdx.x) % T::kChunksPerRow;
  const uint32_t dst = swizzled(r0, c);
  const int key_end = int(p.key_end);
#pragma unroll
  for (int i = 0; i < T::kKvChunksPerThread; ++i) {
    const int key = key0 + r0 + i * T::kRowsPerPass;
    const bool valid = key < key_end;
    const uint64_t off = uint64_t(uint32_t(valid ? key : key_end - 1)) * uint32_t(p.kv_seq_stride) +
                         uint32_t(c * T::kChunkElems);
    const uint32_t at = dst + uint32_t(i * T::kRowsPerPass) * uint32_t(T::kRowBytes);
    cp_async_16(sk + at, kh + off, valid);
    cp_async_16(sv + at, vh + off, valid);
  }
}

// ---- the forward kernel --------------------------------------------------------

template <class T, KvType kKv>
__global__ void __launch_bounds__(T::kThreads, 1) attn_fwd_m128n64_sm80(const FwdParams p) {
  using Op = Operands<kKv>;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sq = smem_addr(smem);
  const uint32_t sk0 = sq + uint32_t(T::kQTileBytes);
  const uint32_t sv0 = sk0 + uint32_t(T::kStages * T::kKvTileBytes);

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int64_t row0 = int64_t(blockIdx.x) * T::kBlockM;
  const int64_t head = blockIdx.y;
  const uint16_t* kh = p.k + head * p.kv_head_stride;
  const uint16_t* vh = p.v + head * p.kv_head_stride;
  const int n_tiles = int((p.key_end - p.key_begin + T::kBlockN - 1) / T::kBlockN);

  // Group 0: Q; group 1: K/V tile 0. The state loads below overlap both.
  load_q_tile<T>(sq, p, row0, head);
  cp_async_commit();
  load_kv_tile<T>(sk0, sv0, kh, vh, p, int(p.key_begin));
  cp_async_commit();

  // This lane's rows (mma C layout): g and g + 8 of each of the warp's slabs;
  // columns 2 * (lane % 4) + {0, 1} of every n8 block. Rows past `rows` start
  // from the reset state and are never stored. Each slab's arithmetic is the
  // one-slab kernel's: a row's bits do not depend on which slab holds it.
  const int g = lane / 4, col = 2 * (lane % 4);
  const int64_t warp_row0 = row0 + warp * T::kWarpRows + g;
  // The (row, head) index of the lane's first row, and 8 rows on: one base
  // and one step rather than an index per row kept over the key loop.
  const int64_t sh0 = warp_row0 * p.heads + head, sh_step = 8 * p.heads;
  static_assert(Mma::kM == 2 * 8, "a slab's rows are g and g + 8: index steps of 8 rows");
  // m and l of the CTA's rows between tiles (the traits' kStateInRegisters):
  // one slab keeps them in registers; two keep them in shared memory, where
  // the quad's lane 0 writes them and every lane of the quad reads the same
  // bits.
  float* const state_m =
      reinterpret_cast<float*>(smem + T::kQTileBytes + 2 * T::kStages * T::kKvTileBytes);
  float* const state_l = state_m + T::kBlockM;
  auto local_row = [&](int sl, int r) { return warp * T::kWarpRows + sl * Mma::kM + r * 8 + g; };
  static_assert(!T::kStateInRegisters || T::kSlabs == 1, "the registers' state is one slab's");
  OnlineSoftmax kept_state[1];
  float acc[T::kSlabs][T::kOBlocks][Mma::kCRegs];
#pragma unroll
  for (int sl = 0; sl < T::kSlabs; ++sl) {
#pragma unroll
    for (int r = 0; r < OnlineSoftmax::kRows; ++r) {
      const int64_t row = warp_row0 + sl * Mma::kM + r * 8;
      const bool in_range = row < p.rows;
      const int64_t sh = sh0 + (2 * sl + r) * sh_step;  // (row, head) index of m and l
      if constexpr (T::kStateInRegisters) {
        kept_state[0].m[r] = in_range ? p.m[sh] : -kInf;
        kept_state[0].l[r] = in_range ? p.l[sh] : 0.0f;
      } else if (lane % 4 == 0) {
        state_m[local_row(sl, r)] = in_range ? p.m[sh] : -kInf;
        state_l[local_row(sl, r)] = in_range ? p.l[sh] : 0.0f;
      }
#pragma unroll
      for (int n = 0; n < T::kOBlocks; ++n) {
        float2 a = make_float2(0.0f, 0.0f);
        if (in_range)
          a = *reinterpret_cast<const float2*>(p.acc + sh * T::kHeadDim + n * Mma::kN + col);
        acc[sl][n][2 * r] = a.x;
        acc[sl][n][2 * r + 1] = a.y;
      }
    }
  }

  // Q fragments (A operand), one x4 ldmatrix per k16 step and slab: lanes
  // 0-15 address the slab's rows 0-15 at the step's first 8 dims, lanes 16-31
  // the same rows at +8. One slab: loaded once, kept in registers; more: read
  // again at each tile's k16 step.
  const uint32_t q_lane = lane_offset(warp * T::kWarpRows + lane % 16, lane / 16);
  // Read again per tile, Q is converted to the MMA's type once, in shared
  // memory (the same conversion of the same words: the same operand bits).
  auto load_q = [&](uint32_t(&f)[Mma::kARegs], int kk, int sl) {
    ldmatrix_x4(f, step_addr(sq, q_lane, 2 * kk, sl * Mma::kM));
    if constexpr (T::kQInRegisters) {
#pragma unroll
      for (int i = 0; i < Mma::kARegs; ++i) f[i] = Op::q_word(f[i]);
    }
  };
  cp_async_wait<1>();
  __syncthreads();
  if constexpr (!T::kQInRegisters && kKv != KvType::bf16) {
    uint4* const q_words = reinterpret_cast<uint4*>(smem);
    for (int i = int(threadIdx.x); i < int(T::kQTileBytes / sizeof(uint4)); i += T::kThreads) {
      uint4 w = q_words[i];
      w = make_uint4(Op::q_word(w.x), Op::q_word(w.y), Op::q_word(w.z), Op::q_word(w.w));
      q_words[i] = w;
    }
    __syncthreads();
  }
  uint32_t q_kept[T::kQInRegisters ? T::kQkKSteps : 1][Mma::kARegs];
  if constexpr (T::kQInRegisters) {
#pragma unroll
    for (int kk = 0; kk < T::kQkKSteps; ++kk) load_q(q_kept[kk], kk, 0);
  }
  // K (B of S = Q K^T) is [key][dim], the column-major B operand: plain
  // ldmatrix, matrices (keys +0, dims +0), (keys +0, dims +8), (keys +8, dims
  // +0), (keys +8, dims +8) = b0, b1 of key block 2j, then of 2j + 1.
  const uint32_t k_lane = lane_offset((lane / 16) * 8 + lane % 8, (lane / 8) % 2);
  // V (B of O += P V) is [key][dim], a row-major B operand: ldmatrix.trans,
  // matrices (keys +0, dims +0), (keys +8, dims +0), (keys +0, dims +8),
  // (keys +8, dims +8) = b0, b1 of dim block 2j, then of 2j + 1.
  const uint32_t v_lane = lane_offset(((lane / 8) % 2) * 8 + lane % 8, lane / 16);

  for (int t = 0; t < n_tiles; ++t) {
    const int key0 = int(p.key_begin) + t * T::kBlockN;
    // Prefetch the next tile into the other stage (freed by the barrier at
    // the end of the previous iteration); always commit so the wait below
    // counts groups the same way on the last tile.
    if (t + 1 < n_tiles) {
      const uint32_t next = uint32_t(((t + 1) % T::kStages) * T::kKvTileBytes);
      load_kv_tile<T>(sk0 + next, sv0 + next, kh, vh, p, key0 + T::kBlockN);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const uint32_t stage = uint32_t((t % T::kStages) * T::kKvTileBytes);
    const uint32_t sk = sk0 + stage, sv = sv0 + stage;

    // S = Q K^T, each score block accumulated over the head dims in order;
    // each K fragment serves every slab.
    float s[T::kSlabs][T::kSBlocks][Mma::kCRegs];
#pragma unroll
    for (int sl = 0; sl < T::kSlabs; ++sl) {
#pragma unroll
      for (int n = 0; n < T::kSBlocks; ++n)
        s[sl][n][0] = s[sl][n][1] = s[sl][n][2] = s[sl][n][3] = 0.0f;
    }
#pragma unroll
    for (int kk = 0; kk < T::kQkKSteps; ++kk) {
      uint32_t q_step[T::kQInRegisters ? 1 : T::kSlabs][Mma::kARegs];
      if constexpr (!T::kQInRegisters) {
#pragma unroll
        for (int sl = 0; sl < T::kSlabs; ++sl) load_q(q_step[sl], kk, sl);
      }
#pragma unroll
      for (int j = 0; j < T::kSBlocks / 2; ++j) {
        uint32_t b[4];
        ldmatrix_x4(b, step_addr(sk, k_lane, 2 * kk, 2 * Mma::kN * j));
#pragma unroll
        for (int sl = 0; sl < T::kSlabs; ++sl) {
          if constexpr (T::kQInRegisters) {
            Op::mma(s[sl][2 * j], q_kept[kk], b[0], b[1]);
            Op::mma(s[sl][2 * j + 1], q_kept[kk], b[2], b[3]);
          } else {
            Op::mma(s[sl][2 * j], q_step[sl], b[0], b[1]);
            Op::mma(s[sl][2 * j + 1], q_step[sl], b[2], b[3]);
          }
        }
      }
    }

    // Mask keys past key_end (the raw scores go to the softmax, which folds
    // the scale into its exponent). Only keys are masked, and a valid key's
    // score is the same value whether or not its tile is partial, so the
    // branch (uniform: it depends on the tile alone) changes no bits.
    const int valid_keys = min(int(p.key_end) - key0, T::kBlockN);
    uint32_t pa[T::kSlabs][T::kPvKSteps][Mma::kARegs];
#pragma unroll
    for (int sl = 0; sl < T::kSlabs; ++sl) {
      if (valid_keys < T::kBlockN) {
#pragma unroll
        for (int n = 0; n < T::kSBlocks; ++n) {
#pragma unroll
          for (int i = 0; i < Mma::kCRegs; ++i)
            if (n * Mma::kN + col + i % 2 >= valid_keys) s[sl][n][i] = -kInf;
        }
      }

      float alpha[OnlineSoftmax::kRows];
      if constexpr (T::kStateInRegisters) {
        kept_state[0].consume(s[sl], alpha);
      } else {
        // (the barrier after the state's writes, at the prologue's or the
        // previous tile's end, makes them visible to the quad)
        OnlineSoftmax state;
#pragma unroll
        for (int r = 0; r < OnlineSoftmax::kRows; ++r) {
          state.m[r] = state_m[local_row(sl, r)];
          state.l[r] = state_l[local_row(sl, r)];
        }
        state.consume(s[sl], alpha);
        __syncwarp();  // the quad's reads above before lane 0's writes
        if (lane % 4 == 0) {
#pragma unroll
          for (int r = 0; r < OnlineSoftmax::kRows; ++r) {
            state_m[local_row(sl, r)] = state.m[r];
            state_l[local_row(sl, r)] = state.l[r];
          }
        }
      }
      // O *= alpha on every tile. Skipping it where the warp's rows kept their
      // max (the Hopper consumer's warp_keeps_max) lost here: the one-slab
      // tile 4.411 s with the skip, 4.050 s without (H100, 217,088 tokens,
      // 2026-12-07); with two slabs the branch spilled.
#pragma unroll
      for (int n = 0; n < T::kOBlocks; ++n) {
#pragma unroll
        for (int i = 0; i < Mma::kCRegs; ++i)
          acc[sl][n][i] = __fmul_rn(acc[sl][n][i], alpha[i / 2]);
      }
      // P rounded to bf16 (fp16) now, its fp32 values already summed in l:
      // the C fragments of score blocks 2k and 2k + 1 are exactly the A
      // fragment of k16 step k (FA2's register reuse), and packed they take
      // half the registers of the scores.
#pragma unroll
      for (int kk = 0; kk < T::kPvKSteps; ++kk) {
        pa[sl][kk][0] = Op::pack_p(s[sl][2 * kk][0], s[sl][2 * kk][1]);
        pa[sl][kk][1] = Op::pack_p(s[sl][2 * kk][2], s[sl][2 * kk][3]);
        pa[sl][kk][2] = Op::pack_p(s[sl][2 * kk + 1][0], s[sl][2 * kk + 1][1]);
        pa[sl][kk][3] = Op::pack_p(s[sl][2 * kk + 1][2], s[sl][2 * kk + 1][3]);
      }
    }

    // O += P V over the tile's keys in order; each V fragment serves every slab.
#pragma unroll
    for (int kk = 0; kk < T::kPvKSteps; ++kk) {
#pragma unroll
      for (int j = 0; j < T::kOBlocks / 2; ++j) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, step_addr(sv, v_lane, 2 * j, Mma::kK * kk));
#pragma unroll
        for (int sl = 0; sl < T::kSlabs; ++sl) {
          Op::mma(acc[sl][2 * j], pa[sl][kk], b[0], b[1]);
          Op::mma(acc[sl][2 * j + 1], pa[sl][kk], b[2], b[3]);
        }
      }
    }
    // Every warp is done with this stage before the next iteration refills it.
    __syncthreads();
  }
  cp_async_wait<0>();  // only empty groups can be pending here

  // The rows' indices again, from an opaque copy of the block index: kept
  // from the prologue they would take registers through the key loop.
  int block = int(blockIdx.x);
  asm volatile("" : "+r"(block));
  const int64_t out_row0 = int64_t(block) * T::kBlockM + warp * T::kWarpRows + g;
  const int64_t out_sh0 = out_row0 * p.heads + head;
#pragma unroll
  for (int sl = 0; sl < T::kSlabs; ++sl) {
#pragma unroll
    for (int r = 0; r < OnlineSoftmax::kRows; ++r) {
      const int64_t row = out_row0 + sl * Mma::kM + r * 8;
      if (row >= p.rows) continue;
      const int64_t sh = out_sh0 + (2 * sl + r) * (8 * p.heads);
      if (lane % 4 == 0) {
        p.m[sh] = T::kStateInRegisters ? kept_state[0].m[r] : state_m[local_row(sl, r)];
        p.l[sh] = T::kStateInRegisters ? kept_state[0].l[r] : state_l[local_row(sl, r)];
      }
#pragma unroll
      for (int n = 0; n < T::kOBlocks; ++n)
        *reinterpret_cast<float2*>(p.acc + sh * T::kHeadDim + n * Mma::kN + col) =
            make_float2(acc[sl][n][2 * r], acc[sl][n][2 * r + 1]);
    }
  }
}

// ---- finish and reset -----------------------------------------------------------

constexpr int kEltThreads = 256;
constexpr int kFinishVec = 4;  // dims per thread: one float4 of acc
static_assert(Geom::kHeadDim % kFinishVec == 0);

// out[r, h * 128 + d] = bf16(acc[r, h, d] / l[r, h]): IEEE division, RNE.
__global__ void __launch_bounds__(kEltThreads)
    attn_finish_bf16(const float* l, const float* acc, uint16_t* out, int64_t ldo, int64_t rows,
                     int64_t heads, bool out_aligned8) {
  constexpr int kVecPerHead = Geom::kHeadDim / kFinishVec;
  const int64_t total = rows * heads * kVecPerHead;
  for (int64_t i = int64_t(blockIdx.x) * kEltThreads + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * kEltThreads) {
    const int64_t sh = i / kVecPerHead;  // (row, head)
    const int d = int(i % kVecPerHead) * kFinishVec;
    const int64_t r = sh / heads, h = sh % heads;
    const float denom = l[sh];
    const float4 a = *reinterpret_cast<const float4*>(acc + sh * Geom::kHeadDim + d);
    const uint32_t lo = pack_bf16(__fdiv_rn(a.x, denom), __fdiv_rn(a.y, denom));
    const uint32_t hi = pack_bf16(__fdiv_rn(a.z, denom), __fdiv_rn(a.w, denom));
    uint16_t* o = out + r * ldo + h * Geom::kHeadDim + d;
    if (out_aligned8) {
      *reinterpret_cast<uint2*>(o) = make_uint2(lo, hi);
    } else {
      o[0] = uint16_t(lo & 0xffffu);
      o[1] = uint16_t(lo >> 16);
      o[2] = uint16_t(hi & 0xffffu);
      o[3] = uint16_t(hi >> 16);
    }
  }
}

__global__ void __launch_bounds__(kEltThreads)
    attn_reset_f32(float* m, float* l, float* acc, int64_t rows, int64_t heads) {
  const int64_t n_rows = rows * heads, n_acc = n_rows * Geom::kHeadDim;
  const int64_t stride = int64_t(gridDim.x) * kEltThreads;
  for (int64_t i = int64_t(blockIdx.x) * kEltThreads + threadIdx.x; i < n_acc; i += stride) {
    acc[i] = 0.0f;
    if (i < n_rows) {
      m[i] = -kInf;
      l[i] = 0.0f;
    }
  }
}

// ---- launch helpers ----------------------------------------------------------------

// Elementwise grids: enough blocks to fill the GPU, grid-stride beyond that
// (64-bit counts never reach the 2^31 block limit).
unsigned elt_blocks(int64_t n) {
  constexpr int64_t kMaxBlocks = 1 << 16;
  const int64_t b = (n + kEltThreads - 1) / kEltThreads;
  return unsigned(b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b));
}

}  // namespace

namespace {

template <class T, KvType kKv>
void launch_sm80(const FwdParams& p, cudaStream_t s, const char* name) {
  // > 48 KiB of dynamic shared memory needs the opt-in (per device, so set
  // on every launch; it is a cheap attribute write).
  cudaFuncSetAttribute(attn_fwd_m128n64_sm80<T, kKv>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(T::kSmemBytes));
  const dim3 grid(unsigned((p.rows + T::kBlockM - 1) / T::kBlockM), unsigned(p.heads));
  attn_fwd_m128n64_sm80<T, kKv><<<grid, T::kThreads, T::kSmemBytes, s>>>(p);
  check_launch(name);
}

template <KvType kKv>
void launch_sm80(const FwdParams& p, cudaStream_t s, int slabs, const char* name) {
  if (slabs == 0)
    slabs = attn_sm80_slabs(arch::smem_per_sm_bytes(), int(AttnFwdTwoSlabs::kSmemBytes));
  if (slabs == 2)
    launch_sm80<AttnFwdTwoSlabs, kKv>(p, s, name);
  else
    launch_sm80<AttnFwdOneSlab, kKv>(p, s, name);
}

}  // namespace

void attention_fwd_sm80(const FwdParams& p, cudaStream_t s, int slabs) {
  if (slabs != 0 && slabs != 1 && slabs != 2)
    fail_internal("attention_fwd_sm80: slabs must be 0 (the device's), 1 or 2");
  if (p.kv_type == KvType::f16)
    launch_sm80<KvType::f16>(p, s, slabs, "attn_fwd_f16_m128n64_sm80");
  else
    launch_sm80<KvType::bf16>(p, s, slabs, "attn_fwd_bf16_m128n64_sm80");
}

}  // namespace attn

void attention_finish(const float* l, const float* acc, uint16_t* out, int64_t ldo, int64_t rows,
                      int64_t heads, cudaStream_t s) {
  if (rows <= 0 || heads <= 0) return;
  if (!aligned_to(acc, 16)) fail_internal("attention_finish: acc must be 16-byte aligned");
  if (!aligned_to(out, 2)) fail_internal("attention_finish: out must be 2-byte aligned");
  const bool out_aligned8 = aligned_to(out, 8) && ldo % 4 == 0;
  const int64_t n = rows * heads * (attn::Geom::kHeadDim / attn::kFinishVec);
  attn::attn_finish_bf16<<<attn::elt_blocks(n), attn::kEltThreads, 0, s>>>(l, acc, out, ldo, rows,
                                                                           heads, out_aligned8);
  check_launch("attn_finish_bf16");
}

void attention_reset(float* m, float* l, float* acc, int64_t rows, int64_t heads, cudaStream_t s) {
  if (rows <= 0 || heads <= 0) return;
  const int64_t n = rows * heads * attn::Geom::kHeadDim;
  attn::attn_reset_f32<<<attn::elt_blocks(n), attn::kEltThreads, 0, s>>>(m, l, acc, rows, heads);
  check_launch("attn_reset_f32");
}

}  // namespace h3s::cuda
