// Traits of the kvi8r Hopper attention (attn_fwd_i8r_sm90.cu): the
// warp-specialised exact kernel (AttnWsTraits: the same tiles, consumers,
// ping-pong and arithmetic) with K and V arriving as int8 codes and one fp16
// scale per key, dequantised to fp16 in shared memory as kvfmt/kvi8r.hpp
// defines (fp16 of code x scale):
//
//   warpgroups 0, 1  producers (attn_i8r_sm90_dual_direct_load.cuh), one per
//                operand: warpgroup 0 converts every K tile (and issues Q's
//                TMA), warpgroup 1 every V tile. Each thread loads its items'
//                codes of the next tile from L2 into registers, and its key's
//                scale; per tile the scales go to the stage's slot and every
//                code tile is dequantised into the exact kernel's swizzled
//                layout, in the fp16 ring the consumers read.
//   the last 2 warpgroups  the exact kernel's consumers with fp16 operands
//                (q' converted to fp16 once, P rounded to fp16): no per-key work.
//
// The codes cross the memory system at half the 16-bit bytes; the
// dequantisation costs issue slots on the producers' warps, none on the
// consumers'. The variants that lost (one producer warpgroup, a code ring in
// shared memory) and their figures: bench/results/experiments/
// removed_kvi8r_variants.diff and docs/PERFORMANCE.md "kvi8r".
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention/attn_ws_sm90_traits.cuh"

namespace h3s::cuda::attn {

struct AttnI8rTraits : AttnWsTraits<2, true> {
  using Base = AttnWsTraits<2, true>;
  // Warp roles: two producer warpgroups (these shadow Base's: the kernel, the
  // launch and the consumers read them through T).
  static constexpr int kProducerWarpGroups = 2;
  static constexpr int kWarpGroups = kProducerWarpGroups + Base::kConsumerWarpGroups;
  static constexpr int kThreads = kWarpGroups * arch::kWarpGroupThreads;
  static constexpr int kLaunchRegs = (arch::kSmRegisters / kThreads) / 8 * 8;  // 128
  // No code ring in shared memory (AttnI8rSmem's, which kvfp4s fills).
  static constexpr int kI8Stages = 0;
  // fp16 operands: K and V as the definition dequantises them; q' converted
  // to fp16 (exact for |q'| in fp16's normal range: H3's queries are
  // RMS-normed; satfinite beyond), P rounded to fp16.
  static constexpr wgmma::Operand16 kOperand = wgmma::Operand16::f16;

  // A producer thread holds a tile's codes (32 registers), so the split is
  // 64/192 (ptxas: no consumer spill at 192, spills at 168), filling the
  // 512-thread CTA's 128 a thread.
  static constexpr int kProducerRegs = 64;
  static constexpr int kConsumerRegs = 192;
  static_assert((kProducerWarpGroups * kProducerRegs + Base::kConsumerWarpGroups * kConsumerRegs) *
                        arch::kWarpGroupThreads <=
                    kLaunchRegs * kThreads,
                "the register split exceeds the CTA's launch allocation");
  static constexpr int kConverterThreads = arch::kWarpGroupThreads;
  // A 16-bit K/V stage is full once every converter thread has written its part.
  static constexpr int kKvFullArrivals = kConverterThreads;

  // A code tile: kBlockN keys x 128 one-byte codes (rows of the store); the
  // converter reads it in items of 8 codes, one 16-byte chunk of fp16
  // (16-code items, two chunks from one load, measured slower:
  // docs/PERFORMANCE.md "kvi8r").
  static constexpr int kCodeRowBytes = Base::kHeadDim;
  static constexpr int kItemCodes = 8;
  static constexpr int kItemsPerRow = Base::kHeadDim / kItemCodes;
  // Each pass converts kRowsPerPass code rows, one item per thread; a
  // thread's items in successive passes sit kPassBytes apart in the 16-bit
  // tile (swizzled rows are 128 bytes), at the same row % 8, so the swizzle
  // is fixed per thread (convert_plan).
  static constexpr int kRowsPerPass = kConverterThreads / kItemsPerRow;  // 8
  static constexpr int kPasses = Base::kBlockN / kRowsPerPass;           // 16
  static constexpr uint32_t kPassBytes = uint32_t(kRowsPerPass) * wgmma::kSwizzleBytes;
  // Passes whose scales are read together, before their items are converted.
  static constexpr int kBatch = 4;
  // Per 16-bit stage: the tile's K and V scales (fp16, one per key), read
  // by the converters only.
  static constexpr uint32_t kScaleItemBytes = 2u;
  static constexpr uint32_t kScaleBytes = 2u * Base::kBlockN * kScaleItemBytes;

  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + Base::kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * Base::kKvTileBytes;
  static constexpr uint32_t kScaleOffset = kVOffset + kStages * Base::kKvTileBytes;
  static constexpr uint32_t kBarOffset = kScaleOffset + kStages * kScaleBytes;
  // Q full; per 16-bit stage K/V full and empty.
  static constexpr int kBarriers = 1 + 4 * kStages;
  static constexpr uint32_t kBarBytes = kBarriers * 8;
  static constexpr size_t kSmemBytes = size_t(kBarOffset) + kBarBytes + wgmma::kAtomBytes;
  // Named barriers 5 and 6: the K and the V converters, after writing a
  // tile's scales (1-4 are the consumers': attn_ws_sm90_traits.cuh).
  static constexpr int kScaleBarrier = Base::kQConvertBarrierBase + Base::kConsumerWarpGroups;

  static_assert(kConverterThreads == Base::kBlockN,
                "converter thread i gathers key i's scales of each tile");
  static_assert(kConverterThreads % kItemsPerRow == 0 && kRowsPerPass % 8 == 0 &&
                    Base::kBlockN % kRowsPerPass == 0 && kPasses % kBatch == 0,
                "every converter thread converts the same items of every tile, at a fixed "
                "row % 8");
  static_assert(kCodeRowBytes == wgmma::kSwizzleBytes,
                "a code row and a swizzled 16-bit half row are both 128 bytes: one pass stride");
  static_assert(kBarOffset % 8 == 0, "mbarriers 8-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 per-block shared memory opt-in");
};

}  // namespace h3s::cuda::attn
