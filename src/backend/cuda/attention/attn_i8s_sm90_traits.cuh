// Tile shapes, warp roles, pipeline stages and the shared-memory plan of the
// kvi8s Hopper attention (attn_fwd_i8s_sm90.cu): the warp-specialised exact
// kernel's structure (AttnWsTraits) on 8-bit tensor cores, as kvfmt/kvi8s.hpp
// defines the arithmetic:
//
//   warpgroup 0  producer: one thread issues TMA loads of Q (bf16, once) and
//                per key tile of the int8 K codes with the tile header's
//                mean digits and scales (one K stage), and of the fp8 V^T
//                codes with the tile's V scales (one V stage).
//   warpgroups 1, 2  consumers, 64 query rows each: Q quantised to int8 in
//                shared memory once; per tile S = Q [K; digits]^T on int8
//                wgmma (m64n144k32: the 16 rows past the keys give q . mean
//                exactly), the online softmax, P = e4m3(p * 256) in
//                registers, O_t = P V on fp8 wgmma (m64n128k32) into a fresh
//                accumulator and acc = fma(O_t, vs, acc * alpha) in fp32 (the
//                two levels). Ping-pong between the warpgroups as the exact
//                kernel, or (kPingPong = false, the default) each takes the
//                tensor cores when ready. Within one (kSchedule): S_t, then
//                P_{t-1} V_{t-1} with P from a shared tile, and the softmax
//                of t beside it (overlap: the default, io-pr-ts), or P_{t-1} V_{t-1}
//                and S_t together and the softmax after both (serial).
//                Variants: Q's A operand from registers (kQInRegs), P's
//                from registers in the overlap schedule (kPInRegs), each
//                row's sum of P from the tensor cores (kSumOnTc), part
//                of the exponentials as a polynomial on the FMA pipe
//                (kPolyEvery).
//
// Row invariance: every shape is a constant and key tiles are consumed in
// order from key_begin (a multiple of the tile), as the exact kernel.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "kvfmt/kvi8s.hpp"

namespace h3s::cuda::attn {

// Where a consumer's tile schedule puts the softmax (AttnI8sConsumer::run).
// serial: P_{t-1} V_{t-1} and S_t issued together, the softmax of t after
// both. overlap: FlashAttention-3's intra-warpgroup overlap, S_t then
// P_{t-1} V_{t-1}, the softmax of t while P_{t-1} V_{t-1} is on the tensor
// cores; P is read from a shared tile per consumer (written with stmatrix).
// overlap_fold: the same with the fold of t-1 moved to the start of t + 1,
// beside S_{t+1} on the tensor cores.
enum class AttnI8sSchedule { serial, overlap, overlap_fold };

template <int kStages_, int kChains_, bool kPingPong_, bool kFusedExp_, bool kMagicInt_,
          AttnI8sSchedule kSchedule_ = AttnI8sSchedule::serial, bool kQInRegs_ = false,
          int kPolyEvery_ = 0, bool kPInRegs_ = false, bool kSumOnTc_ = false,
          int kClusterCtas_ = 1>
struct AttnI8sTraits {
  static constexpr int kHeadDim = AttnScale::kHeadDim;
  static constexpr int kStages = kStages_;
  // The tensor cores handed between the consumers (the exact kernel's
  // ping-pong) or taken by whichever is ready.
  static constexpr bool kPingPong = kPingPong_;
  // Independent chains of the softmax's sum (OnlineSoftmax::consume).
  static constexpr int kSoftmaxChains = kChains_;
  // The exponent's fma folded into the score's: p = 2^(float(dq) qk log2e +
  // (corr log2e + shift)), one fma a score instead of two (the max still
  // comes from the int32 dots, in the definition's units).
  static constexpr bool kFusedExp = kFusedExp_;
  // The int32 dot to fp32 by the exact magic-number add (|dq| < 2^22) on
  // the integer pipe, 1.5 * 2^23 folded into the fused fma's addend,
  // instead of I2FP.
  static constexpr bool kMagicInt = kMagicInt_;
  static_assert(kFusedExp || !kMagicInt, "the magic number's addend rides on the fused fma");
  static constexpr AttnI8sSchedule kSchedule = kSchedule_;
  static constexpr bool kOverlap = kSchedule != AttnI8sSchedule::serial;
  static constexpr bool kFoldLate = kSchedule == AttnI8sSchedule::overlap_fold;
  // S = Q K^T with Q's int8 A fragments in registers (16 a thread, loaded
  // once from the Q8 tile) instead of shared memory: each tile's S then reads
  // only K from shared memory (8 KiB less a warpgroup a tile, of ~50 KiB).
  // The int32 dots are exact either way: the same bits.
  static constexpr bool kQInRegs = kQInRegs_;
  // Every kPolyEvery-th n8 key block's exponentials on the FMA pipe
  // (attn_exp2_poly.hpp) instead of the SFU: 1 / kPolyEvery of P (0: none).
  // The polynomial's error (<= 7.5e-5) moves an e4m3 P now and then: other
  // bits than without it, bounded by the tier's GPU tests.
  static constexpr int kPolyEvery = kPolyEvery_;
  // overlap: P_{t-1} V_{t-1} with P's A fragments from registers (the serial
  // schedule's form) instead of a shared tile. P_t is packed from the
  // softmax's fp32 once P_{t-1} V_{t-1} has finished reading the fragments,
  // so one fragment set suffices: no stmatrix, proxy fence or warpgroup
  // barrier a tile, and 8 KiB less shared memory read. The same bits.
  static constexpr bool kPInRegs = kPInRegs_;
  static_assert(!kPInRegs || kSchedule == AttnI8sSchedule::overlap,
                "P from registers is the overlap schedule's variant (serial always does it)");
  // The softmax's row sums taken by the tensor cores: P V runs as m64n136,
  // its B operand's 8 rows past V^T's channels e4m3 ones (written once a
  // stage), so O's columns 128..135 hold each row's sum of the e4m3 P the
  // MMA multiplied, in the MMA's accumulation. It replaces 64 FADDs, the
  // quad's shuffles and the chains' combination a tile a thread; the sum
  // joins l at the fold (l = l alpha + sum 2^-8, the same steps one tile
  // later). Other bits than io-pr's: the denominator sums the e4m3 P
  // the numerator multiplies (the definition sums the fp32 p), bounded by
  // the tier's GPU tests like ex2.approx.
  static constexpr bool kSumOnTc = kSumOnTc_;
  static_assert(!kSumOnTc || (kPInRegs && kFusedExp),
                "the row sums ride on P V's register-A form (kPInRegs) and the fused softmax");
  static constexpr int kOnesRows = kSumOnTc ? 8 : 0;  // one n8 block of B
  static constexpr int kPvN = AttnScale::kHeadDim + kOnesRows;
  static_assert(kPolyEvery == 0 || (kFusedExp && kMagicInt),
                "the polynomial rides on the fused exponent's argument");

  // Warp roles and the register split (as AttnWsTraits: the consumers hold
  // O's fp32 accumulator (64), the tile's P V accumulator (64), S (72 int32)
  // and P (16 x 4 fp8) per thread).
  static constexpr int kProducerWarpGroups = 1;
  static constexpr int kConsumerWarpGroups = 2;
  // CTAs of a cluster that share every K/V tile (1: alone). A pair owns two
  // adjacent query blocks of one head: rank 0's producer loads each K stage,
  // rank 1's each V stage, each multicast into both CTAs, so L2 sends every
  // tile once a pair. A stage is reloaded once both CTAs' consumers released
  // it: every consumer thread arrives on its own CTA's empty barrier and one
  // lane a warp on the peer's. The arithmetic is unchanged: the same bits.
  static constexpr int kClusterCtas = kClusterCtas_;
  static_assert(kClusterCtas == 1 || kClusterCtas == 2, "alone or a cluster pair");
  static constexpr int kWarpGroups = kProducerWarpGroups + kConsumerWarpGroups;
  static constexpr int kThreads = kWarpGroups * arch::kWarpGroupThreads;
  static constexpr int kConsumerThreads = kConsumerWarpGroups * arch::kWarpGroupThreads;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static constexpr int kLaunchRegs = (arch::kSmRegisters / kThreads) / 8 * 8;
  static_assert((kProducerWarpGroups * kProducerRegs + kConsumerWarpGroups * kConsumerRegs) *
                        arch::kWarpGroupThreads <=
                    kLaunchRegs * kThreads,
                "the register split exceeds the CTA's launch allocation");

  // Tiles.
  static constexpr int kGroupRows = 64;  // wgmma m64
  static constexpr int kBlockM = kConsumerWarpGroups * kGroupRows;
  static constexpr int kBlockN = int(kvi8s::kTile);  // keys per tile: one header, one V scale
  static constexpr int kMmaK = 32;                   // 8-bit wgmma k
  static constexpr int kQkSteps = kHeadDim / kMmaK;  // k32 steps of S over head dims
  static constexpr int kPvSteps = kBlockN / kMmaK;   // k32 steps of O over keys
  // S's N: the keys, then the header's mean-digit rows rounded up to the
  // int8 wgmma's N granularity (16): columns kBlockN + 2b (hi) and + 2b + 1
  // (lo) are block b's q_code . digits.
  static constexpr int kDigitRows = 2 * kvi8s::kBlocksPerTile;
  static constexpr int kSN = kBlockN + 16;
  static constexpr int kSRegs = kSN / 2;  // int32 per thread of m64 x kSN
  static constexpr int kKeyBlocks = kBlockN / 8;
  static constexpr int kOBlocks = kHeadDim / 8;
  static constexpr int kAccRegs = kOBlocks * 4;
  static constexpr int kPvRegs = kPvN / 2;  // P V's accumulator (kSumOnTc: 4 row-sum registers)
  static constexpr int kLog2PScale = 8;     // P = e4m3(p * 2^8), kvi8s::kPScale
  static_assert(float(1 << kLog2PScale) == kvi8s::kPScale, "P's scale is kvi8s's");

  // Shared memory. Every 8-bit row is 128 bytes, one swizzle row: tiles are
  // stacks of 1024-byte atoms (TMA writes them with CU_TENSOR_MAP_SWIZZLE_128B).
  static constexpr int kRowBytes = wgmma::kSwizzleBytes;
  static constexpr int kHalfDims = wgmma::kSwizzleBytes / 2;  // bf16 Q: two 64-dim halves
  static constexpr int kHalves = kHeadDim / kHalfDims;
  static constexpr uint32_t kQHalfBytes = uint32_t(kBlockM) * wgmma::kSwizzleBytes;
  static constexpr uint32_t kQBytes = kHalves * kQHalfBytes;                   // 32 KiB, bf16
  static constexpr uint32_t kQ8GroupBytes = uint32_t(kGroupRows) * kRowBytes;  // 8 KiB, int8
  static constexpr uint32_t kQ8Bytes = kConsumerWarpGroups * kQ8GroupBytes;
  static constexpr uint32_t kKCodeBytes = uint32_t(kBlockN) * kRowBytes;
  // The header's K rows (digits, then the scales row) land right after the
  // codes: S's rows kBlockN.. read them. The rest of the kSN rows are never
  // written (int8 has no NaN: their columns of S are ignored).
  static constexpr int kHeaderKRows = kvi8s::kRowScales + 1;
  static constexpr int kHeaderVRows = kvi8s::kHeaderRows - kvi8s::kRowVScale;
  static constexpr uint32_t kKStageBytes = uint32_t(kSN) * kRowBytes;  // 18 KiB
  static constexpr uint32_t kKTxBytes = kKCodeBytes + uint32_t(kHeaderKRows) * kRowBytes;
  static constexpr uint32_t kVCodeBytes = uint32_t(kHeadDim) * kRowBytes;
  static constexpr uint32_t kVTxBytes = kVCodeBytes + uint32_t(kHeaderVRows) * kRowBytes;
  // kSumOnTc: the ones rows, one atom right after the codes (P V's B rows
  // 128..135); the header's V rows follow them.
  static constexpr uint32_t kVOnesBytes = uint32_t(kOnesRows) * kRowBytes;
  static constexpr uint32_t kVStageBytes = (kVTxBytes + kVOnesBytes + wgmma::kAtomBytes - 1) /
                                           wgmma::kAtomBytes *
                                           wgmma::kAtomBytes;  // 17 KiB (18 with the ones)
  static constexpr uint32_t kQScaleBytes = uint32_t(kBlockM) * 4;
  // overlap: P (e4m3, 64 rows x 128 keys) per consumer, 128-byte swizzled
  // like Q8, the A operand of P V.
  static constexpr uint32_t kPGroupBytes = uint32_t(kGroupRows) * kRowBytes;  // 8 KiB
  static constexpr uint32_t kPBytes =
      kOverlap && !kPInRegs ? kConsumerWarpGroups * kPGroupBytes : 0;

  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kQ8Offset = kQOffset + kQBytes;
  static constexpr uint32_t kKOffset = kQ8Offset + kQ8Bytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKStageBytes;
  static constexpr uint32_t kPOffset = kVOffset + kStages * kVStageBytes;
  static constexpr uint32_t kQScaleOffset = kPOffset + kPBytes;
  static constexpr uint32_t kBarOffset = kQScaleOffset + kQScaleBytes;
  // Barriers: Q full; per stage K full, V full, K empty, V empty.
  static constexpr int kKvFullArrivals = 1;
  static constexpr int kConsumerWarps = kConsumerThreads / 32;
  static constexpr int kEmptyArrivals = kConsumerThreads + (kClusterCtas - 1) * kConsumerWarps;
  static constexpr int kBarriers = 1 + 4 * kStages;
  static constexpr uint32_t kBarBytes = kBarriers * 8;
  static constexpr size_t kSmemBytes = size_t(kBarOffset) + kBarBytes + wgmma::kAtomBytes;

  // Named barriers 1 and 2: the tensor-core ping-pong; 3 and 4: consumer c's
  // warpgroup after quantising its Q rows (and, overlapped, after writing
  // its P tile).
  static constexpr int kSchedBarrierBase = 1;
  static constexpr int kSchedBarrierThreads = 2 * arch::kWarpGroupThreads;
  static constexpr int kQReadyBarrierBase = kSchedBarrierBase + kConsumerWarpGroups;

  static_assert(kHeadDim == kvi8s::kDim && kRowBytes == kvi8s::kDim,
                "an 8-bit code row is one 128-byte swizzle row");
  static_assert(kDigitRows <= kSN - kBlockN && kHeaderKRows <= kSN - kBlockN,
                "the header's K rows fit S's extra columns");
  static_assert(kEngineKvTile == kBlockN, "a key tile is the engine's K/V tile and kvi8s's");
  static_assert(kKStageBytes % wgmma::kAtomBytes == 0 && kQ8Offset % wgmma::kAtomBytes == 0 &&
                    kKOffset % wgmma::kAtomBytes == 0 && kVOffset % wgmma::kAtomBytes == 0 &&
                    kKCodeBytes % wgmma::kAtomBytes == 0 && kVCodeBytes % wgmma::kAtomBytes == 0 &&
                    kPOffset % wgmma::kAtomBytes == 0 && kVOnesBytes % wgmma::kAtomBytes == 0,
                "TMA's 128-byte swizzle needs every tile on a 1024-byte boundary");
  static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 per-block shared memory opt-in");
  static_assert(kStages >= 2, "one tile loads while the other is consumed");
};

}  // namespace h3s::cuda::attn
