// Tile shapes, warps and the shared-memory plan of the kvi8s attention on
// mma.sync (attn_fwd_i8s_sm89.cu: RTX 40/50-series and other sm_89+ GPUs,
// which have int8 and fp8 mma.sync but no wgmma). FlashAttention-2's
// layout: a CTA of 8 warps owns 128 query rows of one head, each warp an
// m16 slab whose int8 Q fragments stay in registers; K/V tiles stream
// through a cp.async double buffer. The per-tile arithmetic is the Hopper
// consumer's (AttnI8sConsumer: the softmax from the int32 dots, P as e4m3
// A fragments, the fold of the tile's P V into the fp32 accumulator), so
// the constants it reads are named as in AttnI8sTraits; the shared-memory
// tiles are laid out as TMA writes them there (128-byte rows, 16-byte chunk
// c of row r at c ^ r % 8, every tile on a 1024-byte boundary), so its
// header reads are the same too.
//
// Row invariance: every shape is a constant and key tiles are consumed in
// order from key_begin (a multiple of the tile), as every attention kernel.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/smem_limits.hpp"
#include "backend/cuda/attention/attn_params.cuh"
#include "kvfmt/kvi8s.hpp"

namespace h3s::cuda::attn {

struct AttnI8sSm89Traits {
  static constexpr int kHeadDim = AttnScale::kHeadDim;
  static constexpr int kWarps = 8;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = 16;  // mma m16
  static constexpr int kBlockM = kWarps * kWarpRows;
  static constexpr int kBlockN = int(kvi8s::kTile);  // keys per tile: one header, one V scale
  static constexpr int kStages = 2;                  // cp.async double buffer
  static constexpr int kMmaN = 8;
  static constexpr int kMmaK = 32;                   // 8-bit mma k
  static constexpr int kQkSteps = kHeadDim / kMmaK;  // k32 steps of S over head dims
  static constexpr int kPvSteps = kBlockN / kMmaK;   // k32 steps of O over keys
  static constexpr int kKeyBlocks = kBlockN / kMmaN;
  static constexpr int kOBlocks = kHeadDim / kMmaN;
  // S's columns: the keys, then one n8 block over the header's K rows, whose
  // first four columns are the two K blocks' mean digits (hi, lo): q . mean
  // exactly, from the same int8 MMA (wgmma needs n16 there; mma.sync n8).
  static constexpr int kDigitRows = 2 * kvi8s::kBlocksPerTile;
  static constexpr int kSN = kBlockN + kMmaN;
  static constexpr int kSRegs = kSN / 2;  // int32 per thread of m16 x kSN
  static constexpr int kAccRegs = kOBlocks * 4;
  static constexpr int kPvRegs = kAccRegs;  // the tile's P V, folded into acc
  static constexpr int kLog2PScale = 8;     // P = e4m3(p * 2^8), kvi8s::kPScale
  // AttnI8sConsumer's softmax sums l from the fp32 p (io-pr's arithmetic),
  // where the Hopper kernel's traits take the e4m3 P's sums from P V.
  static constexpr bool kSumOnTc = false;
  static_assert(float(1 << kLog2PScale) == kvi8s::kPScale, "P's scale is kvi8s's");

  // Shared memory: 128-byte rows (one 8-bit code row), 1024-byte atoms.
  static constexpr int kRowBytes = 128;
  static constexpr int kChunks = kRowBytes / 16;  // 16-byte cp.async chunks a row
  static constexpr uint32_t kAtomBytes = 8 * kRowBytes;
  static constexpr uint32_t kQ8Bytes = uint32_t(kBlockM) * kRowBytes;  // 16 KiB
  // A K stage: the codes, then the header's K rows (digits, scales) as S's
  // rows kBlockN..; the rest of the n8 block is never written (int8 has no
  // NaN: those columns of S are ignored).
  static constexpr int kHeaderKRows = kvi8s::kRowScales + 1;
  static constexpr int kHeaderVRows = kvi8s::kHeaderRows - kvi8s::kRowVScale;
  static constexpr uint32_t kKCodeBytes = uint32_t(kBlockN) * kRowBytes;
  static constexpr uint32_t kKStageBytes = uint32_t(kSN) * kRowBytes;  // 17 KiB
  // A V stage: the V^T codes (a row per channel), then the header's V rows.
  static constexpr uint32_t kVCodeBytes = uint32_t(kHeadDim) * kRowBytes;
  static constexpr uint32_t kVStageBytes =
      (kVCodeBytes + uint32_t(kHeaderVRows) * kRowBytes + kAtomBytes - 1) / kAtomBytes *
      kAtomBytes;  // 17 KiB
  static constexpr uint32_t kQ8Offset = 0;
  static constexpr uint32_t kKOffset = kQ8Offset + kQ8Bytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKStageBytes;
  static constexpr size_t kSmemBytes = size_t(kVOffset) + kStages * kVStageBytes + kAtomBytes;

  static_assert(kHeadDim == kvi8s::kDim && kRowBytes == kvi8s::kDim,
                "an 8-bit code row is one 128-byte shared row");
  static_assert(kDigitRows <= kMmaN && kHeaderKRows <= kSN - kBlockN,
                "the header's K rows fit S's extra n8 block");
  static_assert(kEngineKvTile == kBlockN, "a key tile is the engine's K/V tile and kvi8s's");
  static_assert(kKStageBytes % kAtomBytes == 0 && kKOffset % kAtomBytes == 0 &&
                    kVOffset % kAtomBytes == 0 && kKCodeBytes % kAtomBytes == 0 &&
                    kVCodeBytes % kAtomBytes == 0,
                "the swizzle (and the header reads) assume tiles on 1024-byte boundaries");
  static_assert(kSmemBytes <= size_t(arch::kSmemOptInSm86),
                "exceeds the shared memory a block may take on sm_89/120");
};

}  // namespace h3s::cuda::attn
