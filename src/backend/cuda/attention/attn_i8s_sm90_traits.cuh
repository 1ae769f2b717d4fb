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
//                shared memory once; per tile S_t = Q [K; digits]^T on int8
//                wgmma (m64n144k32: the 16 rows past the keys give q . mean
//                exactly), then P_{t-1} V_{t-1} on fp8 wgmma (m64n136k32, P's
//                A operand from registers, a fresh accumulator) while the
//                softmax of t runs (FlashAttention-3's intra-warpgroup
//                overlap), P = e4m3(p * 256), and acc = fma(O, vs, acc *
//                alpha) in fp32 (the two levels). The consumers do not hand
//                the tensor cores to each other: each takes them when ready.
//
// The variants that lost (ping-pong, the serial schedules, P through shared
// memory, Q in registers, the FMA-pipe exponent, cluster pairs) and their
// figures: bench/results/experiments/removed_kvi8s_variants.diff and
// docs/PERFORMANCE.md "kvi8s".
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

struct AttnI8sTraits {
  static constexpr int kHeadDim = AttnScale::kHeadDim;
  static constexpr int kStages = 4;
  // The softmax's row sums taken by the tensor cores: P V runs as m64n136,
  // its B operand's 8 rows past V^T's channels e4m3 ones (written once a
  // stage), so O's columns 128..135 hold each row's sum of the e4m3 P the
  // MMA multiplied, in the MMA's accumulation. It replaces 64 FADDs, the
  // quad's shuffles and the chains' combination a tile a thread; the sum
  // joins l at the fold (l = l alpha + sum 2^-8, the same steps one tile
  // later). The denominator sums the e4m3 P the numerator multiplies (the
  // definition sums the fp32 p), bounded by the tier's GPU tests like
  // ex2.approx. (AttnI8sConsumer's softmax reads it: the mma.sync kernel's
  // traits, attn_i8s_sm89_traits.cuh, sum the fp32 p.)
  static constexpr bool kSumOnTc = true;
  static constexpr int kOnesRows = 8;  // one n8 block of B
  static constexpr int kPvN = AttnScale::kHeadDim + kOnesRows;

  // Warp roles and the register split (as AttnWsTraits: the consumers hold
  // O's fp32 accumulator (64), the tile's P V accumulator (68), S (72 int32)
  // and P (16 x 4 fp8) per thread).
  static constexpr int kProducerWarpGroups = 1;
  static constexpr int kConsumerWarpGroups = 2;
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
  static constexpr int kPvRegs = kPvN / 2;  // P V's accumulator: O's, then 4 row-sum registers
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
  // The ones rows, one atom right after the V^T codes (P V's B rows
  // 128..135); the header's V rows follow them.
  static constexpr uint32_t kVOnesBytes = uint32_t(kOnesRows) * kRowBytes;
  static constexpr uint32_t kVStageBytes = (kVTxBytes + kVOnesBytes + wgmma::kAtomBytes - 1) /
                                           wgmma::kAtomBytes * wgmma::kAtomBytes;  // 18 KiB
  static constexpr uint32_t kQScaleBytes = uint32_t(kBlockM) * 4;

  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kQ8Offset = kQOffset + kQBytes;
  static constexpr uint32_t kKOffset = kQ8Offset + kQ8Bytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKStageBytes;
  static constexpr uint32_t kQScaleOffset = kVOffset + kStages * kVStageBytes;
  static constexpr uint32_t kBarOffset = kQScaleOffset + kQScaleBytes;
  // Barriers: Q full; per stage K full, V full, K empty, V empty. A stage is
  // empty once every consumer thread released it.
  static constexpr int kEmptyArrivals = kConsumerThreads;
  static constexpr int kBarriers = 1 + 4 * kStages;
  static constexpr uint32_t kBarBytes = kBarriers * 8;
  static constexpr size_t kSmemBytes = size_t(kBarOffset) + kBarBytes + wgmma::kAtomBytes;

  // Named barriers 3 and 4: consumer c's warpgroup after quantising its Q
  // rows (the exact kernel's numbers: its ping-pong takes 1 and 2).
  static constexpr int kQReadyBarrierBase = 3;

  static_assert(kHeadDim == kvi8s::kDim && kRowBytes == kvi8s::kDim,
                "an 8-bit code row is one 128-byte swizzle row");
  static_assert(kDigitRows <= kSN - kBlockN && kHeaderKRows <= kSN - kBlockN,
                "the header's K rows fit S's extra columns");
  static_assert(kEngineKvTile == kBlockN, "a key tile is the engine's K/V tile and kvi8s's");
  static_assert(kKStageBytes % wgmma::kAtomBytes == 0 && kQ8Offset % wgmma::kAtomBytes == 0 &&
                    kKOffset % wgmma::kAtomBytes == 0 && kVOffset % wgmma::kAtomBytes == 0 &&
                    kKCodeBytes % wgmma::kAtomBytes == 0 && kVCodeBytes % wgmma::kAtomBytes == 0 &&
                    kVOnesBytes % wgmma::kAtomBytes == 0,
                "TMA's 128-byte swizzle needs every tile on a 1024-byte boundary");
  static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 per-block shared memory opt-in");
};

}  // namespace h3s::cuda::attn
