// Traits of the kvfp4s Hopper attention (attn_fwd_fp4s_sm90.cu): the
// warp-specialised exact kernel (AttnWsTraits: the same tiles, consumers,
// ping-pong and bf16 arithmetic) with K and V arriving as NVFP4 (e2m1 codes,
// an e4m3 scale per 16 elements, a per-block global and K mean), decoded to
// bf16 in shared memory as kvfmt/kvfp4s.hpp defines (K~ = bf16(x^ g + mean),
// V~ = bf16(x^ g)). Hopper has no fp4 tensor cores; the codes cross the
// memory system at a quarter of the 16-bit bytes.
//
//   warpgroups 0, 1  producers (attn_fp4s_sm90_dual_load.cuh), one per
//                operand: warpgroup 0 decodes every K tile (and issues Q's
//                TMA), warpgroup 1 every V tile, each with its own TMA issuer
//                of its code tiles into a kI8Stages-deep code ring, scale
//                loads and named barrier. Thread i loads key i's scales (and
//                the tile's means and globals) one tile ahead into the 16-bit
//                stage's slot, converted to bf16; all 128 threads decode each
//                code tile into the exact kernel's swizzled layout.
//   warpgroups 2, 3  the exact kernel's consumers, unchanged.
//
// Two producer warpgroups because one is the kernel's bottleneck (profiled:
// the consumers' K-full wait the largest stall), one warp a scheduler whose
// decode is issue- and latency-bound. The variants that lost (one producer
// warpgroup, a deeper decoder batch) and their figures:
// bench/results/experiments/removed_kvfp4s_variants.diff and
// docs/PERFORMANCE.md "kvfp4s".
//
// The member names are AttnI8rTraits' (AttnI8rSmem and convert_plan read
// them); the code tiles and the scale slot differ.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention/attn_ws_sm90_traits.cuh"

namespace h3s::cuda::attn {

struct AttnFp4sTraits : AttnWsTraits<2, true> {
  using Base = AttnWsTraits<2, true>;
  // Warp roles: two producer warpgroups (these shadow Base's: the kernel, the
  // launch and the consumers read them through T).
  static constexpr int kProducerWarpGroups = 2;
  static constexpr int kWarpGroups = kProducerWarpGroups + Base::kConsumerWarpGroups;
  static constexpr int kThreads = kWarpGroups * arch::kWarpGroupThreads;
  static constexpr int kLaunchRegs = (arch::kSmRegisters / kThreads) / 8 * 8;  // 128
  static constexpr int kI8Stages = 2;                                          // code-ring depth
  static constexpr int kGroup = 16;  // elements per e4m3 scale
  static constexpr int kGroups = Base::kHeadDim / kGroup;
  static constexpr int64_t kStatBlock = 256;  // keys per stat block: a shift, not a division

  // The decoder holds a batch of codes, the item's eight K mean pairs, the
  // byte tables, its 16-bit results and their addresses; one operand a
  // warpgroup in a 512-thread CTA (128 a thread): ptxas spills the K decoder
  // at 40 and 48 and nothing at 64/192 (kvi8r's split).
  static constexpr int kProducerRegs = 64;
  static constexpr int kConsumerRegs = 192;
  static_assert((kProducerWarpGroups * kProducerRegs + Base::kConsumerWarpGroups * kConsumerRegs) *
                        arch::kWarpGroupThreads <=
                    kLaunchRegs * kThreads,
                "the register split exceeds the CTA's launch allocation");
  static constexpr int kConverterThreads = arch::kWarpGroupThreads;
  static constexpr int kKvFullArrivals = kConverterThreads;

  // A code tile: kBlockN keys x 64 bytes (128 e2m1 codes), unswizzled (TMA
  // box 64 x 1 x kBlockN). A decoder item is one scale group: 16 codes, 8
  // bytes, two 16-byte chunks of bf16.
  static constexpr int kCodeRowBytes = Base::kHeadDim / 2;
  static constexpr uint32_t kI8TileBytes = uint32_t(Base::kBlockN) * kCodeRowBytes;  // 8 KiB
  static constexpr int kItemCodes = kGroup;
  static constexpr int kItemsPerRow = Base::kHeadDim / kItemCodes;       // 8
  static constexpr int kRowsPerPass = kConverterThreads / kItemsPerRow;  // 16
  static constexpr int kPasses = Base::kBlockN / kRowsPerPass;           // 8
  static constexpr uint32_t kPassBytes = uint32_t(kRowsPerPass) * wgmma::kSwizzleBytes;
  static constexpr uint32_t kPassCodeBytes = uint32_t(kRowsPerPass) * kCodeRowBytes;
  static constexpr int kBatch = 2;  // items loaded before the first is decoded

  // Per 16-bit stage, a slot the decoders read: each key's K scales then
  // V scales (kGroups bf16 each), the tile's K means (128 bf16: a tile lies
  // in one 256-key stat block) and its globals (bf16x2 pairs of g_k, g_v).
  static constexpr uint32_t kScaleItemBytes = kGroups * 2u;  // per key
  static constexpr uint32_t kSlotMeans = 2u * Base::kBlockN * kScaleItemBytes;
  static constexpr uint32_t kSlotGlobals = kSlotMeans + Base::kHeadDim * 2u;
  static constexpr uint32_t kScaleBytes = kSlotGlobals + 16u;

  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + Base::kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * Base::kKvTileBytes;
  static constexpr uint32_t kI8KOffset = kVOffset + kStages * Base::kKvTileBytes;
  static constexpr uint32_t kI8VOffset = kI8KOffset + kI8Stages * kI8TileBytes;
  static constexpr uint32_t kScaleOffset = kI8VOffset + kI8Stages * kI8TileBytes;
  static constexpr uint32_t kBarOffset = kScaleOffset + kStages * kScaleBytes;
  static constexpr int kBarriers = 1 + 4 * kStages + 4 * kI8Stages;
  static constexpr uint32_t kBarBytes = kBarriers * 8;
  static constexpr size_t kSmemBytes = size_t(kBarOffset) + kBarBytes + wgmma::kAtomBytes;
  // Named barriers 5 and 6: the K and the V decoders, after writing their
  // part of a tile's slot.
  static constexpr int kScaleBarrier = Base::kQConvertBarrierBase + Base::kConsumerWarpGroups;

  static_assert(kConverterThreads == Base::kBlockN,
                "decoder thread i loads key i's scales of each tile");
  static_assert(kConverterThreads % kItemsPerRow == 0 && kRowsPerPass % 8 == 0 &&
                    Base::kBlockN % kRowsPerPass == 0 && kPasses % kBatch == 0,
                "every decoder thread decodes the same items of every tile, at a fixed row % 8");
  static_assert(kI8KOffset % 128 == 0 && kI8VOffset % 128 == 0 && kScaleOffset % 16 == 0 &&
                    kScaleBytes % 16 == 0 && kBarOffset % 8 == 0,
                "TMA destinations 128-byte aligned, slots 16-byte, mbarriers 8-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 per-block shared memory opt-in");
};

}  // namespace h3s::cuda::attn
