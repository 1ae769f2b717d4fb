// Tile shapes of the GEMMs, in one place: the mma.sync tile shared by
// gemm_bf16, gemm_i8 and gemm_w4a8, the operand policies that tell them
// apart, gemm_w4a8's packed-weight layout, and the fp32 FFMA tile of gemm_f32.
//
// Row invariance (backend.hpp): every shape here is a compile-time constant,
// never chosen from M (or N). An output element (m, n) is always the same
// instruction sequence: K-tiles 0, 1, 2, ... in order, and within a K-tile the
// same K slices in order, whatever CTA tile or position inside it the element
// falls on. Rows past M, columns past N and K past K are zero-filled in shared
// memory, and a zero row of A (or column of B) changes no other sum.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mma_sm80.cuh"
#include "backend/cuda/arch/smem_limits.hpp"

namespace h3s::cuda::gemm {

// The sm80 primitives (arch/mma_sm80.cuh) the GEMM kernels call unqualified.
using arch::cp_async_16;
using arch::cp_async_4;
using arch::cp_async_commit;
using arch::cp_async_wait;
using arch::ldmatrix_x4;
using arch::ldmatrix_x4_trans;
using arch::mma_bf16_m16n8k16;
using arch::mma_s8_m16n8k32;
using arch::pack_bf16x2;
using arch::smem_addr;

// ---- tensor-core tile (mma.sync m16n8, Ampere-style; runs on sm_90a) --------
//
// The tile is counted in BYTES of K: a shared-memory row holds 128 bytes (64
// bf16 or 128 int8) and one mma consumes a 32-byte K slice (m16n8k16 bf16 or
// m16n8k32 s8). Both MMAs have the same byte layout of their register
// fragments, so one ldmatrix mainloop (gemm_mainloop_sm80.cuh) serves both.
struct MmaTileSm80 {
  // 128 x 128 outputs per CTA: 8 warps of 64 x 32, enough mma work per
  // ldmatrix (16 mma per 6 ldmatrix.x4) to keep the tensor pipe busy.
  static constexpr int kBlockM = 128;
  static constexpr int kBlockN = 128;
  static constexpr int kBlockKBytes = 128;
  // 3 stages x 32 KiB = 96 KiB, so two CTAs fit one SM (228 KiB); the second
  // CTA hides the other's barrier and epilogue.
  static constexpr int kStages = 3;
  static constexpr int kWarpsM = 2;
  static constexpr int kWarpsN = 4;
  static constexpr int kMinCtasPerSm = 2;
  // Groups of kGroupM M-tiles sweep all N-tiles before moving on, so CTAs
  // resident together share their A rows and B columns in L2. This decides
  // which CTA computes a tile, never the arithmetic of a tile.
  static constexpr int kGroupM = 8;

  static constexpr int kWarps = kWarpsM * kWarpsN;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kWarpM = kBlockM / kWarpsM;  // 64
  static constexpr int kWarpN = kBlockN / kWarpsN;  // 32

  // mma.sync fragment shape, in bytes of K.
  static constexpr int kMmaM = 16;
  static constexpr int kMmaN = 8;
  static constexpr int kMmaKBytes = 32;
  static constexpr int kFragsM = kWarpM / kMmaM;              // 4 A fragments per warp
  static constexpr int kFragsN = kWarpN / kMmaN;              // 4 B fragments per warp
  static constexpr int kKSlices = kBlockKBytes / kMmaKBytes;  // 4 mma steps per K-tile

  // Global -> shared copies move 16-byte chunks (cp.async's widest); a
  // shared row is kChunks chunks, stored XOR-swizzled (swizzle() below).
  static constexpr int kChunkBytes = 16;
  static constexpr int kChunks = kBlockKBytes / kChunkBytes;  // 8

  static constexpr int kTileBytesA = kBlockM * kBlockKBytes;
  static constexpr int kTileBytesB = kBlockN * kBlockKBytes;
  static constexpr int kStageBytes = kTileBytesA + kTileBytesB;
  static constexpr int kSmemBytes = kStages * kStageBytes;

  static_assert(kBlockM % kWarpsM == 0 && kBlockN % kWarpsN == 0, "warps must tile the CTA");
  static_assert(kWarpM % kMmaM == 0 && kWarpN % kMmaN == 0, "mma fragments must tile a warp");
  static_assert(kFragsN % 2 == 0, "B is loaded two n8 fragments per ldmatrix.x4");
  static_assert(kBlockKBytes % kMmaKBytes == 0, "a K-tile is whole mma K slices");
  static_assert(kMmaKBytes == 2 * kChunkBytes, "one mma K slice is two ldmatrix columns");
  // The swizzle permutes the 8 chunks of a row by row % 8: every ldmatrix
  // phase (8 rows, one logical chunk) and every 8-thread cp.async phase (one
  // row) then touches all 32 banks once.
  static_assert(kChunks == 8, "swizzle() assumes 128-byte rows of 8 chunks");
  static_assert(kBlockM * kChunks % kThreads == 0 && kBlockN * kChunks % kThreads == 0,
                "every thread copies the same number of chunks");
  static_assert(kStages >= 2, "the pipeline needs a stage to fill while one is read");
  static_assert(kMinCtasPerSm * kSmemBytes <= 227 * 1024, "shared memory per SM (sm_90)");
  // gemm_bf16 and gemm_i8 run this tile on every sm_80+ GPU, RTX 30/40/50 cards included.
  static_assert(kSmemBytes <= arch::kSmemOptInSm86,
                "exceeds the shared memory a block may take on sm_86/89/120");

  // Byte offset of logical chunk `chunk` of row `row` inside a tile.
  __device__ static constexpr uint32_t swizzle(int row, int chunk) {
    return uint32_t(row * kBlockKBytes + ((chunk ^ (row & 7)) * kChunkBytes));
  }
};

// ---- operand policies: what differs between gemm_bf16 and gemm_i8 ----------

struct Bf16Operands {
  using Elem = uint16_t;  // bf16 bits
  using Acc = float;
  static constexpr int kElemBytes = 2;
  // A K multiple of 16 elements is a whole number of 32-byte mma slices, so
  // no slice straddles K's end.
  static constexpr int64_t kKMultiple = 16;
  __device__ static void mma(Acc (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    mma_bf16_m16n8k16(d, a, b);
  }
};

struct S8Operands {
  using Elem = int8_t;
  using Acc = int32_t;
  static constexpr int kElemBytes = 1;
  static constexpr int64_t kKMultiple = 32;
  __device__ static void mma(Acc (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    mma_s8_m16n8k32(d, a, b);
  }
};

static_assert(Bf16Operands::kKMultiple * Bf16Operands::kElemBytes == MmaTileSm80::kMmaKBytes);
static_assert(S8Operands::kKMultiple * S8Operands::kElemBytes == MmaTileSm80::kMmaKBytes);

// ---- W4A8 weights decoded in the kernel (gemm_w4a8) -------------------------
//
// gemm_w4a8 is gemm_i8 with B arriving packed: per weight row, 4-bit codes
// (two per byte, even column in the low nibble) and one e4m3 scale byte per
// 16 columns. Each CTA decodes a K-tile of packed B into the same swizzled
// int8 B tile gemm_i8 copies from memory, then runs gemm_i8's mma steps and
// epilogue on it. The decode is one table look-up per weight: w8 depends only
// on (scale byte, code), so a CTA first fills a 256 x 16 int8 table with
// clamp(rne(level[code] * e4m3(byte)), -127, 127) and then selects from its
// rows with byte permutes.
template <int kStages_ = MmaTileSm80::kStages>
struct W4A8TileSm80 {
  using T = MmaTileSm80;
  // cp.async stages of A and the packed B. Three, as gemm_i8, where two CTAs
  // fit an SM (Hopper, A100); two where a block may take 99 KiB (sm_86,
  // sm_89: RTX 30 and 40 series). The depth changes no arithmetic.
  static constexpr int kStages = kStages_;
  static constexpr int kGroup = 16;   // K columns per e4m3 scale
  static constexpr int kLevels = 16;  // 4-bit codes
  static constexpr int kScaleValues = 256;

  // Packed bytes of one weight row per K-tile (128 int8 columns).
  static constexpr int kCodeRowBytes = T::kBlockKBytes / 2;        // 64
  static constexpr int kScaleRowBytes = T::kBlockKBytes / kGroup;  // 8
  // Two threads per weight row, each owning half its K-tile: 32 code bytes
  // (two cp.async chunks) and the 4 scale bytes of those 64 columns (one
  // 4-byte cp.async). A thread decodes exactly the bytes it copied, so the
  // decode needs only its own cp.async wait, no barrier.
  static constexpr int kThreadsPerRow = T::kThreads / T::kBlockN;                    // 2
  static constexpr int kCodeBytesPerThread = kCodeRowBytes / kThreadsPerRow;         // 32
  static constexpr int kCodeChunksPerThread = kCodeBytesPerThread / T::kChunkBytes;  // 2
  static constexpr int kScaleBytesPerThread = kScaleRowBytes / kThreadsPerRow;       // 4
  static constexpr int kGroupsPerThread = kScaleBytesPerThread;                      // 4
  // K (int8 columns) one thread decodes per K-tile, and the int8 chunks that
  // makes in the decoded tile.
  static constexpr int kColsPerThread = kGroupsPerThread * kGroup;                 // 64
  static constexpr int kDecodedChunksPerThread = kColsPerThread / T::kChunkBytes;  // 4

  // K must be whole 16-byte chunks of codes (32 columns = 2 groups), which is
  // also whole s8 mma slices.
  static constexpr int64_t kKMultiple = 2 * T::kChunkBytes;

  // Shared memory: kStages x (A tile + packed B tile + scales), two decoded B
  // tiles (one is filled while the other is read, so one barrier per K-tile
  // suffices), and the decode table.
  static constexpr int kTileBytesCodes = T::kBlockN * kCodeRowBytes;    // 8 KiB
  static constexpr int kTileBytesScales = T::kBlockN * kScaleRowBytes;  // 1 KiB
  static constexpr int kStageBytes = T::kTileBytesA + kTileBytesCodes + kTileBytesScales;
  static constexpr int kDecodedTiles = 2;
  static constexpr int kTableBytes = kScaleValues * kLevels;  // 4 KiB
  static constexpr int kDecodedOffset = kStages * kStageBytes;
  static constexpr int kTableOffset = kDecodedOffset + kDecodedTiles * T::kTileBytesB;
  static constexpr int kSmemBytes = kTableOffset + kTableBytes;  // 111 KiB (3 stages), 86 (2)

  static_assert(kThreadsPerRow * T::kBlockN == T::kThreads, "threads tile the packed rows");
  static_assert(kCodeBytesPerThread % T::kChunkBytes == 0, "whole cp.async chunks of codes");
  static_assert(kScaleBytesPerThread == 4, "one 4-byte cp.async of scales per thread");
  static_assert(kColsPerThread == 2 * kCodeBytesPerThread, "two codes per byte");
  static_assert(kGroup % 8 == 0, "a 32-bit code word (8 codes) lies in one group");
  static_assert(kKMultiple % S8Operands::kKMultiple == 0, "whole s8 mma slices");
  static_assert(kScaleValues % T::kThreads == 0, "every thread fills the same table rows");
  static_assert(T::kTileBytesB == T::kBlockN * T::kBlockKBytes, "decoded B is gemm_i8's B tile");
  static_assert(kStages >= 2, "the pipeline needs a stage to fill while one is read");
  // sm_90: 228 KiB of shared memory per SM, 1 KiB of it reserved per CTA.
  static_assert(T::kMinCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024,
                "two CTAs per SM, like gemm_i8");
};

// ---- fp32 FFMA tile (gemm_f32) ----------------------------------------------
//
// The fp32 islands are small (patch embeds K = 96 / 32, time embedder, output
// heads N = 96 / 32 at K = 5376): correctness over speed. Each thread owns
// kThreadM x kThreadN outputs strided by the thread grid, and every output
// runs one fma chain over k = 0, 1, ..., K - 1 in order.
struct F32Tile {
  static constexpr int kBlockM = 64;
  static constexpr int kBlockN = 64;
  static constexpr int kBlockK = 16;
  static constexpr int kThreadsM = 16;
  static constexpr int kThreadsN = 16;
  static constexpr int kThreads = kThreadsM * kThreadsN;
  static constexpr int kThreadM = kBlockM / kThreadsM;  // 4 outputs per thread in M
  static constexpr int kThreadN = kBlockN / kThreadsN;  // 4 in N
  // Shared tiles are K-major ([k][m], [k][n]) so the inner loop reads a row;
  // one float of padding turns the transposing stores' 16-way bank conflict
  // into at most 2-way.
  static constexpr int kPad = 1;
  static constexpr int kLdsM = kBlockM + kPad;
  static constexpr int kLdsN = kBlockN + kPad;
  static constexpr int kLoadsX = kBlockM * kBlockK / kThreads;
  static constexpr int kLoadsW = kBlockN * kBlockK / kThreads;

  static_assert(kBlockM % kThreadsM == 0 && kBlockN % kThreadsN == 0, "threads tile the CTA");
  static_assert(kBlockM * kBlockK % kThreads == 0 && kBlockN * kBlockK % kThreads == 0,
                "every thread loads the same number of elements");
  static_assert(kThreads % kBlockK == 0, "a thread keeps its k column across loads");
  static_assert(kBlockK * (kLdsM + kLdsN) * 4 <= 48 * 1024, "static shared memory limit");
};

}  // namespace h3s::cuda::gemm
