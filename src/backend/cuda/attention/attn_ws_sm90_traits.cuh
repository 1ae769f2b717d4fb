// Tile shapes, warp roles, pipeline stages and the shared-memory plan of the
// warp-specialised Hopper attention forward (attn_fwd_ws_sm90.cu), the one
// place that names them. FlashAttention-3's hopper/ kernel is the model:
//
//   warpgroup 0  producer: one thread issues TMA loads of Q (once) and of the
//                K and V tiles through a kStages-deep ring of mbarriers;
//                setmaxnreg gives its registers to the consumers.
//   warpgroups 1, 2  consumers: 64 query rows each; S = Q K^T and O += P V on
//                wgmma, the online softmax in registers. Within a warpgroup
//                tile t's QK^T runs while tile t-1's PV is issued and the
//                softmax of t overlaps that PV; between the two warpgroups a
//                pair of named barriers hands the tensor cores over
//                (ping-pong), so one group's softmax overlaps the other's MMAs.
//
// Row invariance: every shape is a constant; the key tiles start at
// key_begin (a multiple of kEngineKvTile) and are consumed in increasing
// order, so a row's arithmetic never depends on how many rows share the call,
// on its CTA, or on the K/V blocking.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/arch/warpgroup.cuh"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/attention/attn_params.cuh"

namespace h3s::cuda::attn {

template <int kStages_, bool kPingPong_>
struct AttnWsTraits {
  static constexpr int kHeadDim = AttnScale::kHeadDim;
  static constexpr int kStages = kStages_;
  static constexpr bool kPingPong = kPingPong_;
  // The 16-bit operand type of both MMAs. f16 (kvi8r's fp16 variant): Q
  // lands bf16 and each consumer converts its rows in place before the first
  // MMA; P is packed to f16.
  static constexpr wgmma::Operand16 kOperand = wgmma::Operand16::bf16;

  // Warp roles.
  static constexpr int kProducerWarpGroups = 1;
  static constexpr int kConsumerWarpGroups = 2;
  static constexpr int kWarpGroups = kProducerWarpGroups + kConsumerWarpGroups;
  static constexpr int kThreads = kWarpGroups * arch::kWarpGroupThreads;
  static constexpr int kConsumerThreads = kConsumerWarpGroups * arch::kWarpGroupThreads;
  // Register split (setmaxnreg): the producer needs addresses and a loop
  // counter; each consumer holds O (64 fp32), S (64 fp32) and P (32 x bf16x2)
  // per thread plus the softmax state. Both must fit the SM's file at one CTA.
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  // setmaxnreg moves registers between warpgroups of the CTA's launch
  // allocation (the file divided by the threads, in steps of 8): the
  // consumers' increase blocks until the producer's decrease has freed them,
  // so the split must fit that allocation, not the whole file.
  static constexpr int kLaunchRegs = (arch::kSmRegisters / kThreads) / 8 * 8;  // 168
  static_assert((kProducerWarpGroups * kProducerRegs + kConsumerWarpGroups * kConsumerRegs) *
                        arch::kWarpGroupThreads <=
                    kLaunchRegs * kThreads,
                "the register split exceeds the CTA's launch allocation");

  // Tiles: a consumer's rows are one wgmma M; a key tile is one wgmma N.
  static constexpr int kGroupRows = 64;  // wgmma m64
  static constexpr int kBlockM = kConsumerWarpGroups * kGroupRows;
  static constexpr int kBlockN = 128;  // keys per tile (wgmma n128 of S)
  static constexpr int kMmaK = 16;
  static constexpr int kQkSteps = kHeadDim / kMmaK;  // k16 steps of S over head dims
  static constexpr int kPvSteps = kBlockN / kMmaK;   // k16 steps of O over keys
  static constexpr int kSBlocks = kBlockN / 8;       // n8 score blocks per row
  static constexpr int kOBlocks = kHeadDim / 8;      // n8 output blocks per row
  static constexpr int kAccRegs = kOBlocks * 4;      // fp32 of O per thread
  static constexpr int kSRegs = kSBlocks * 4;        // fp32 of S per thread

  // Shared memory. A 128-dim bf16 row is two 128-byte swizzle rows, so every
  // tile is stored as two halves [rows][64 dims], each a stack of 1024-byte
  // swizzle atoms, which is exactly what a TMA box of 64 x 1 x rows writes
  // with CU_TENSOR_MAP_SWIZZLE_128B.
  static constexpr int kElemBytes = 2;
  static constexpr int kHalfDims = wgmma::kSwizzleBytes / kElemBytes;  // 64: one TMA box row
  static constexpr int kHalves = kHeadDim / kHalfDims;                 // 2
  static constexpr int kStepsPerHalf = kHalfDims / kMmaK;              // 4
  static constexpr uint32_t kQHalfBytes = uint32_t(kBlockM) * wgmma::kSwizzleBytes;
  static constexpr uint32_t kKvHalfBytes = uint32_t(kBlockN) * wgmma::kSwizzleBytes;
  static constexpr uint32_t kQBytes = kHalves * kQHalfBytes;        // 32 KiB
  static constexpr uint32_t kKvTileBytes = kHalves * kKvHalfBytes;  // 32 KiB per K or V tile
  static constexpr uint32_t kQOffset = 0;
  static constexpr uint32_t kKOffset = kQOffset + kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKvTileBytes;
  static constexpr uint32_t kBarOffset = kVOffset + kStages * kKvTileBytes;
  // Barriers: Q full; per stage K full, V full, K empty, V empty (8 bytes each).
  // A K/V stage is full after the producer's one arrive.expect_tx.
  static constexpr int kKvFullArrivals = 1;
  static constexpr int kBarriers = 1 + 4 * kStages;
  static constexpr uint32_t kBarBytes = kBarriers * 8;
  // + one atom of slack to align the dynamic buffer to 1024 bytes.
  static constexpr size_t kSmemBytes = size_t(kBarOffset) + kBarBytes + wgmma::kAtomBytes;

  // Named barriers 1 and 2: consumer c waits on 1 + c before issuing its
  // MMAs and arrives on the other's when they are issued.
  static constexpr int kSchedBarrierBase = 1;
  static constexpr int kSchedBarrierThreads = 2 * arch::kWarpGroupThreads;
  // Named barriers 3 and 4: consumer c's warpgroup after converting its Q rows (f16).
  static constexpr int kQConvertBarrierBase = kSchedBarrierBase + kConsumerWarpGroups;

  static_assert(kBlockN == 128 && kHeadDim == 128, "the wgmma shapes are m64n128k16");
  static_assert(kEngineKvTile % kBlockN == 0,
                "a key tile must divide the engine's K/V tile, or blocked K/V calls would split "
                "a tile and change the arithmetic");
  static_assert(kQOffset % wgmma::kAtomBytes == 0 && kKOffset % wgmma::kAtomBytes == 0 &&
                    kVOffset % wgmma::kAtomBytes == 0 && kKvHalfBytes % wgmma::kAtomBytes == 0,
                "TMA's 128-byte swizzle needs every tile half on a 1024-byte boundary");
  static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 per-block shared memory opt-in");
  static_assert(kStages >= 2, "one tile loads while the other is consumed");
};

}  // namespace h3s::cuda::attn
