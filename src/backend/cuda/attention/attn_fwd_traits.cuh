// Tile shapes of the mma.sync (sm80-style) attention forward: the one place
// that names block M/N, head dim, warps and pipeline stages, with the checks.
//
// Row invariance: every tile below is a constant. The CTA's query block, the
// key tile and the K/V pipeline never depend on the number of query rows, so
// a row's instruction sequence is the same whichever CTA row slot it lands in
// or however many rows share the call. Keys are consumed in kBlockN-key tiles
// counted from key 0; kBlockN divides the engine's kAttnKvTile (backend.hpp),
// so a K/V block boundary (a multiple of 128) is a tile boundary and chained
// calls repeat the single-pass arithmetic bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/arch/smem_limits.hpp"
#include "backend/cuda/attention/attn_params.cuh"

namespace h3s::cuda::attn {

// mma.sync.aligned.m16n8k16 (bf16 in, fp32 accumulate).
struct Mma16816 {
  static constexpr int kM = 16, kN = 8, kK = 16;
  static constexpr int kARegs = 4;  // 8 bf16 of A per lane, packed in pairs
  static constexpr int kBRegs = 2;  // 4 bf16 of B per lane
  static constexpr int kCRegs = 4;  // 4 fp32 of C per lane: rows g and g + 8
};

// A CTA owns 128 query rows either way; a warp owns kSlabs m16 slabs of them.
// The slab count changes no bits (a row's instructions are the same in any
// slab), only how often a K/V fragment read from shared memory is used:
// - two slabs, 4 warps (FlashAttention-2's 128 x 64 tile for head dim 128):
//   each K/V fragment feeds two MMAs, 2.5 ldmatrix per 4 MMA instead of 2 per
//   2; Q is re-read per tile (two slabs' Q, 64 registers, would not fit beside
//   two 64-register accumulators);
// - one slab, 8 warps: Q stays in registers for the whole key loop, and an SM
//   with room for one CTA (RTX 30/40/50: 100 KiB) still runs 8 warps.
// kernel_choice.hpp's attn_sm80_slabs() picks per GPU.
template <int kWarps_, int kSlabs_>
struct AttnFwdTile {
  using Mma = Mma16816;

  static constexpr int kHeadDim = AttnScale::kHeadDim;
  static constexpr int kWarps = kWarps_;
  static constexpr int kSlabs = kSlabs_;
  static constexpr bool kQInRegisters = kSlabs == 1;
  // The rows' softmax state (m, l) between key tiles: in registers for one
  // slab (4 per lane, beside 64 of accumulator and 32 of Q), in shared memory
  // for two, whose accumulators and scores fill the registers.
  static constexpr bool kStateInRegisters = kSlabs == 1;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = kSlabs * Mma::kM;
  static constexpr int kBlockM = kWarps * kWarpRows;  // query rows per CTA
  static constexpr int kBlockN = 64;                  // keys per tile
  static constexpr int kStages = 2;                   // K/V double buffer (cp.async)

  // Fragments one warp holds per key tile.
  static constexpr int kQkKSteps = kHeadDim / Mma::kK;  // S = Q K^T: k over head dims
  static constexpr int kSBlocks = kBlockN / Mma::kN;    // S: n8 blocks of keys
  static constexpr int kPvKSteps = kBlockN / Mma::kK;   // O += P V: k over keys
  static constexpr int kOBlocks = kHeadDim / Mma::kN;   // O: n8 blocks of head dims

  // Shared memory: rows of kHeadDim bf16 split into 16-byte chunks (one
  // cp.async, one ldmatrix row). The chunk index is XORed with (row % 8):
  // the 8 rows one ldmatrix matrix reads then hit 8 distinct 16-byte bank
  // groups, i.e. all 32 banks once, with no padding.
  static constexpr int kElemBytes = 2;
  static constexpr int kChunkElems = 16 / kElemBytes;
  static constexpr int kChunksPerRow = kHeadDim / kChunkElems;
  static constexpr int kSwizzleRows = 8;
  static constexpr size_t kRowBytes = size_t(kHeadDim) * kElemBytes;
  static constexpr size_t kQTileBytes = size_t(kBlockM) * kRowBytes;
  static constexpr size_t kKvTileBytes = size_t(kBlockN) * kRowBytes;
  // The shared-memory home of the rows' state (m, then l, fp32) when it is
  // not in registers; both tiles reserve it, so kernel_choice.hpp reads one
  // CTA size for both (the static_assert below).
  static constexpr size_t kStateBytes = size_t(2 * kBlockM) * sizeof(float);
  static constexpr size_t kSmemBytes =
      kQTileBytes + size_t(2 * kStages) * kKvTileBytes + kStateBytes;

  // cp.async chunks per thread per tile.
  static constexpr int kQChunksPerThread = kBlockM * kChunksPerRow / kThreads;
  static constexpr int kKvChunksPerThread = kBlockN * kChunksPerRow / kThreads;
  // A tile's rows split over the CTA: thread t copies chunk t % 16 of rows
  // t / 16 + i * kRowsPerPass. kRowsPerPass is a multiple of the swizzle
  // period, so the thread's chunk keeps one swizzled column and its
  // shared-memory offsets are one base plus i * kRowsPerPass rows: the compiler
  // need not keep a separate offset per chunk alive across the key loop.
  static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0 && kRowsPerPass % kSwizzleRows == 0,
                "each pass of the CTA covers whole swizzle periods");

  static_assert(kEngineKvTile % kBlockN == 0,
                "a key tile must divide the engine's K/V tile, or blocked K/V calls would "
                "split a tile and change the arithmetic");
  static_assert(kHeadDim % Mma::kK == 0 && kHeadDim % Mma::kN == 0, "head dim vs mma shape");
  static_assert(kBlockN % (2 * Mma::kN) == 0,
                "K fragments are loaded two n8 key blocks per ldmatrix.x4");
  static_assert(kOBlocks % 2 == 0, "V fragments are loaded two n8 dim blocks per ldmatrix.x4");
  static_assert(kSBlocks == 2 * kPvKSteps,
                "two n8 score blocks form one k16 P fragment (C layout == A layout)");
  static_assert(kChunksPerRow % kSwizzleRows == 0 && (kSwizzleRows & (kSwizzleRows - 1)) == 0,
                "the XOR swizzle permutes chunks within aligned groups of 8");
  static_assert(kBlockN % kSwizzleRows == 0 && kWarpRows % kSwizzleRows == 0,
                "tiles start on a swizzle period, so (row % 8) is the lane's row in its matrix");
  static_assert(kBlockM * kChunksPerRow % kThreads == 0, "Q tile splits evenly over threads");
  static_assert(kBlockN * kChunksPerRow % kThreads == 0, "K/V tile splits evenly over threads");
  // 96 KiB: the kernel runs on every sm_80+ GPU, RTX 30/40/50 cards included.
  static_assert(kSmemBytes <= size_t(arch::kSmemOptInSm86),
                "exceeds the shared memory a block may take on sm_86/89/120");
  static_assert(kStages == 2, "the main loop is written for one tile in flight");
  static_assert(kBlockM == 128, "both tiles own 128 rows (the grid and the slab choice)");
};

using AttnFwdOneSlab = AttnFwdTile<8, 1>;
using AttnFwdTwoSlabs = AttnFwdTile<4, 2>;
static_assert(AttnFwdOneSlab::kSmemBytes == AttnFwdTwoSlabs::kSmemBytes,
              "kernel_choice.hpp's slab choice reads one CTA's shared memory for both");

}  // namespace h3s::cuda::attn
