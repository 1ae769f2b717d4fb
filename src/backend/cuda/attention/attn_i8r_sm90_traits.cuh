// Traits of the kvi8r Hopper attention (attn_fwd_i8r_sm90.cu): the
// warp-specialised exact kernel (AttnWsTraits: the same tiles, consumers,
// ping-pong and arithmetic) with K and V arriving as int8 codes and one fp16
// scale per key, dequantised to fp16 in shared memory as kvfmt/kvi8r.hpp
// defines (fp16 of code x scale):
//
//   warpgroup 0  producer. Thread 0 issues the TMA loads of Q and of the int8
//                K and V tiles into a kI8Stages-deep code ring; all 128
//                threads gather the tile's per-key scales into a slot and
//                dequantise each code tile into the exact kernel's swizzled
//                layout, in the fp16 ring the consumers read. The dual
//                producer splits this over warpgroups 0 (K, and Q) and 1
//                (V): attn_i8r_sm90_dual_load.cuh; the dual direct producer
//                (the default) also drops the code ring, each thread loading
//                its codes from L2 into registers:
//                attn_i8r_sm90_dual_direct_load.cuh.
//   the last 2 warpgroups  the exact kernel's consumers with fp16 operands
//                (q' converted to fp16 once, P rounded to fp16): no per-key work.
//
// The codes cross the memory system at half the 16-bit bytes; the
// dequantisation costs shared-memory bandwidth and issue slots on the
// producer's warps, none on the consumers'.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention/attn_ws_sm90_traits.cuh"

namespace h3s::cuda::attn {

// kBatch_: items loaded before the first is converted (0: 8 registers of
// codes); a deeper batch takes registers from the consumers (kWideProducer_).
// kDualProducer_: two producer warpgroups, one converting the K tiles and one
// the V tiles (attn_i8r_sm90_dual_load.cuh), so each scheduler runs two
// independent conversion chains beside its two consumer warps.
template <int kStages_, int kI8Stages_, int kBatch_ = 0, bool kWideProducer_ = false,
          bool kDualProducer_ = false>
struct AttnI8rTraits : AttnWsTraits<kStages_, true> {
  using Base = AttnWsTraits<kStages_, true>;
  // Warp roles: the exact kernel's, or two producer warpgroups (these shadow
  // Base's: the kernel, the launch and the consumers read them through T).
  static constexpr bool kDualProducer = kDualProducer_;
  static constexpr int kProducerWarpGroups = kDualProducer_ ? 2 : Base::kProducerWarpGroups;
  static constexpr int kWarpGroups = kProducerWarpGroups + Base::kConsumerWarpGroups;
  static constexpr int kThreads = kWarpGroups * arch::kWarpGroupThreads;
  static constexpr int kLaunchRegs = (arch::kSmRegisters / kThreads) / 8 * 8;  // 168 or 128
  static constexpr int kI8Stages = kI8Stages_;
  // fp16 operands: K and V as the definition dequantises them; q' converted
  // to fp16 (exact for |q'| in fp16's normal range: H3's queries are
  // RMS-normed; satfinite beyond), P rounded to fp16.
  static constexpr wgmma::Operand16 kOperand = wgmma::Operand16::f16;

  // The converters hold a batch of codes (8 registers), its 16-bit results
  // and their addresses: 40 registers (at 32 ptxas spills the batched
  // loop); the consumers give up 16 of the exact kernel's 240 to fit the
  // launch allocation (attn_ws_sm90_traits.cuh), and do not spill at 224.
  // Wide: 56 for a batch of 16 registers of codes, the consumers at 216
  // (kvfp4s' split; they do not spill there either).
  // Dual: two 40-register producers beside the 216-register consumers fill
  // the 512-thread CTA's 128 a thread.
  // Dual without a code ring: a tile's codes (32 registers) a producer
  // thread, 64/192 (ptxas: no consumer spill at 192, spills at 168).
  static constexpr bool kDirectCodes = kI8Stages_ == 0;
  static constexpr int kProducerRegs = kDirectCodes ? 64 : kWideProducer_ ? 56 : 40;
  static constexpr int kConsumerRegs = kDirectCodes                       ? 192
                                       : kWideProducer_ || kDualProducer_ ? 216
                                                                          : 224;
  static_assert((kProducerWarpGroups * kProducerRegs + Base::kConsumerWarpGroups * kConsumerRegs) *
                        arch::kWarpGroupThreads <=
                    kLaunchRegs * kThreads,
                "the register split exceeds the CTA's launch allocation");
  static constexpr int kConverterThreads = arch::kWarpGroupThreads;
  // A 16-bit K/V stage is full once every converter thread has written its part.
  static constexpr int kKvFullArrivals = kConverterThreads;

  // A code tile: kBlockN keys x 128 one-byte codes, unswizzled (TMA box
  // 128 x 1 x kBlockN); the converter reads it in items of 8 codes, one
  // 16-byte chunk of fp16 (16-code items, two chunks from one load, measured
  // slower: docs/PERFORMANCE.md "kvi8r").
  static constexpr int kCodeRowBytes = Base::kHeadDim;
  static constexpr uint32_t kI8TileBytes = uint32_t(Base::kBlockN) * kCodeRowBytes;  // 16 KiB
  static constexpr int kItemCodes = 8;
  static constexpr int kItemsPerRow = Base::kHeadDim / kItemCodes;
  // Each pass converts kRowsPerPass code rows, one item per thread; a
  // thread's items in successive passes sit kPassBytes apart in both tiles
  // (code rows and swizzled rows are both 128 bytes), at the same row % 8, so
  // the swizzle is fixed per thread (convert_plan).
  static constexpr int kRowsPerPass = kConverterThreads / kItemsPerRow;  // 8
  static constexpr int kPasses = Base::kBlockN / kRowsPerPass;           // 16
  static constexpr uint32_t kPassBytes = uint32_t(kRowsPerPass) * wgmma::kSwizzleBytes;
  // Items loaded before the first is converted: 8 registers of codes, or kBatch_.
  static constexpr int kBatch = kBatch_ > 0 ? kBatch_ : 4;
  // Per 16-bit stage: the tile's K and V scales (fp16, one per key), read
  // by the converters only.
  static constexpr uint32_t kScaleItemBytes = 2u;
  static constexpr uint32_t kScaleBytes = 2u * Base::kBlockN * kScaleItemBytes;

  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + Base::kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages_ * Base::kKvTileBytes;
  static constexpr uint32_t kI8KOffset = kVOffset + kStages_ * Base::kKvTileBytes;
  static constexpr uint32_t kI8VOffset = kI8KOffset + kI8Stages * kI8TileBytes;
  static constexpr uint32_t kScaleOffset = kI8VOffset + kI8Stages * kI8TileBytes;
  static constexpr uint32_t kBarOffset = kScaleOffset + kStages_ * kScaleBytes;
  // Q full; per bf16 stage K/V full and empty; per code stage K/V full and empty.
  static constexpr int kBarriers = 1 + 4 * kStages_ + 4 * kI8Stages;
  static constexpr uint32_t kBarBytes = kBarriers * 8;
  static constexpr size_t kSmemBytes = size_t(kBarOffset) + kBarBytes + wgmma::kAtomBytes;
  // Named barrier 5 (and 6 for the dual producer's V warpgroup): the
  // converters, after writing a tile's scales (1-4 are the consumers':
  // attn_ws_sm90_traits.cuh).
  static constexpr int kScaleBarrier = Base::kQConvertBarrierBase + Base::kConsumerWarpGroups;

  static_assert(kConverterThreads == Base::kBlockN,
                "converter thread i gathers key i's scales of each tile");
  static_assert(kConverterThreads % kItemsPerRow == 0 && kRowsPerPass % 8 == 0 &&
                    Base::kBlockN % kRowsPerPass == 0 && kPasses % kBatch == 0,
                "every converter thread converts the same items of every tile, at a fixed "
                "row % 8");
  static_assert(kCodeRowBytes == wgmma::kSwizzleBytes,
                "a code row and a swizzled 16-bit half row are both 128 bytes: one pass stride");
  static_assert(kI8KOffset % 128 == 0 && kI8VOffset % 128 == 0 && kBarOffset % 8 == 0,
                "TMA destinations 128-byte aligned, mbarriers 8-byte aligned");
  static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 per-block shared memory opt-in");
  static_assert(kI8Stages >= 1 || kDualProducer_, "a code ring, or the dual direct producer");
};

}  // namespace h3s::cuda::attn
