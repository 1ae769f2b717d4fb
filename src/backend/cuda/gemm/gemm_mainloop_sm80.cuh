// The mma.sync mainloop shared by gemm_bf16 and gemm_i8: tile scheduling,
// the cp.async multi-stage pipeline into XOR-swizzled shared tiles, and the
// ldmatrix + mma steps. It leaves a CTA tile's accumulators in registers; each
// .cu file owns its epilogue and launch. gemm_w4a8 runs its own K loop (it
// decodes B between copy and mma) from the same TileLoader and mma_stage.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/mma_sm80.cuh"
#include "backend/cuda/gemm/gemm_traits.cuh"

namespace h3s::cuda::gemm {

// One plain struct of everything the mainloop reads, in bytes so both operand
// types share it. x is [m, k] with row stride ldx_bytes, w is [n, k] with row
// stride ldw_bytes (k in bytes: k_bytes).
struct MmaOperandsArgs {
  const uint8_t* x;
  const uint8_t* w;
  int64_t ldx_bytes, ldw_bytes;
  int64_t m, n, k_bytes;
  int64_t tiles_m, tiles_n;
  // Rows start on 16-byte boundaries: cp.async. Otherwise (a view at an odd
  // column, an odd row stride) the same 16-byte chunks are gathered with byte
  // loads; only the copy differs, the shared tile and the arithmetic are the
  // same, so a chunk whose pointer happens to be aligned gives the same bits.
  bool x_aligned, w_aligned;
};

struct TileCoord {
  int64_t m0, n0;  // first row and first column of the CTA tile
};

// Tile `tile` of tiles_m x tiles_n in grouped order: kGroupM M-tiles, M
// fastest, sweep all N-tiles. Only placement; see MmaTileSm80::kGroupM.
// kBlockN: the CTA tile's width (gemm_i8_sm90's wide tiles are 256).
template <int kBlockN = MmaTileSm80::kBlockN>
__device__ inline TileCoord tile_coord(int64_t tile, int64_t tiles_m, int64_t tiles_n) {
  using T = MmaTileSm80;
  const int64_t per_group = int64_t(T::kGroupM) * tiles_n;
  const int64_t group = tile / per_group;
  const int64_t first_m = group * T::kGroupM;
  const int64_t rows_in_group = min(tiles_m - first_m, int64_t(T::kGroupM));
  const int64_t in_group = tile - group * per_group;
  return {(first_m + in_group % rows_in_group) * T::kBlockM, in_group / rows_in_group * kBlockN};
}

// Copies K-tiles of a kRows-row operand tile (rows [0, rows_left) of the
// matrix valid) into swizzled shared tiles; chunks past the rows or past K
// become zeros. Thread t owns chunk t % 8 of rows t / 8 + 32 i: 8 consecutive
// threads take one row's 128 contiguous bytes (coalesced), and its rows share
// row % 8, hence one swizzled column. Everything but the K offset is fixed per
// thread and kept in a few registers.
template <int kRows>
struct TileLoader {
  using T = MmaTileSm80;
  static constexpr int kRowsPerPass = T::kThreads / T::kChunks;  // 32
  static constexpr int kPasses = kRows / kRowsPerPass;           // chunks per thread
  static_assert(kRows % kRowsPerPass == 0, "every thread copies the same number of chunks");
  static_assert(kRowsPerPass % 8 == 0, "a thread's rows must share row % 8 (one swizzle)");

  const uint8_t* base;  // the tile's first row: a legal address for zero-fill copies
  const uint8_t* src;   // this thread's chunk of its first row, K-tile 0
  int64_t pass_bytes;   // kRowsPerPass rows of the matrix
  int64_t k_left;       // bytes from this thread's chunk to the end of K
  uint32_t dst;         // swizzled offset of the thread's first chunk in a tile
  uint32_t rows_ok;     // bit i: the thread's row of pass i is inside the matrix

  __device__ TileLoader(const uint8_t* tile, int64_t ld, int64_t rows_left, int64_t k_bytes) {
    const int row = int(threadIdx.x) / T::kChunks, chunk = int(threadIdx.x) % T::kChunks;
    base = tile;
    src = tile + row * ld + chunk * T::kChunkBytes;
    pass_bytes = kRowsPerPass * ld;
    k_left = k_bytes - chunk * T::kChunkBytes;
    dst = T::swizzle(row, chunk);
    rows_ok = 0;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) rows_ok |= uint32_t(row + i * kRowsPerPass < rows_left) << i;
  }

  // K-tile starting at byte k0 into the shared tile `tile`.
  __device__ __forceinline__ void load(uint8_t* tile, int64_t k0, bool aligned) const {
    const bool k_ok = k0 < k_left;
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const bool valid = k_ok && ((rows_ok >> i) & 1u);
      const uint8_t* g = valid ? src + i * pass_bytes + k0 : base;
      uint8_t* d = tile + dst + i * kRowsPerPass * T::kBlockKBytes;
      if (aligned) {
        cp_async_16(smem_addr(d), g, valid);
      } else {
        // Slow path for rows off 16-byte boundaries: same bytes, same tile.
        uint32_t v[4] = {0u, 0u, 0u, 0u};
        if (valid) {
#pragma unroll
          for (int b = 0; b < T::kChunkBytes; ++b) v[b / 4] |= uint32_t(g[b]) << (8 * (b % 4));
        }
        *reinterpret_cast<uint4*>(d) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
  }
};

// One K-tile of mma work on a resident stage: kKSlices steps, each loading
// the warp's A and B fragments with ldmatrix and issuing kFragsM x kFragsN
// mma. Every accumulator sees the slices in the same order.
template <class Ops>
__device__ __forceinline__ void mma_stage(
    const uint8_t* tile_a, const uint8_t* tile_b,
    typename Ops::Acc (&acc)[MmaTileSm80::kFragsM][MmaTileSm80::kFragsN][4]) {
  using T = MmaTileSm80;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int warp_m = warp % T::kWarpsM, warp_n = warp / T::kWarpsM;
  // ldmatrix.x4 for A (16 rows x 32 bytes): matrices (rows 0-7 | 8-15) x
  // (chunk lo | hi) = fragment registers a0..a3. For B (16 n x 32 bytes):
  // (n 0-7, lo), (n 0-7, hi), (n 8-15, lo), (n 8-15, hi) = b0, b1 of two n8
  // fragments.
  const int a_row = warp_m * T::kWarpM + lane % 16, a_chunk = lane / 16;
  const int b_row = warp_n * T::kWarpN + lane % 8 + (lane / 16) * 8, b_chunk = (lane / 8) % 2;
  const uint32_t a_base = smem_addr(tile_a), b_base = smem_addr(tile_b);
#pragma unroll
  for (int s = 0; s < T::kKSlices; ++s) {
    uint32_t a[T::kFragsM][4], b[T::kFragsN][2];
#pragma unroll
    for (int fm = 0; fm < T::kFragsM; ++fm)
      ldmatrix_x4(a[fm], a_base + T::swizzle(a_row + fm * T::kMmaM, 2 * s + a_chunk));
#pragma unroll
    for (int fn = 0; fn < T::kFragsN; fn += 2) {
      uint32_t r[4];
      ldmatrix_x4(r, b_base + T::swizzle(b_row + fn * T::kMmaN, 2 * s + b_chunk));
      b[fn][0] = r[0];
      b[fn][1] = r[1];
      b[fn + 1][0] = r[2];
      b[fn + 1][1] = r[3];
    }
#pragma unroll
    for (int fm = 0; fm < T::kFragsM; ++fm)
#pragma unroll
      for (int fn = 0; fn < T::kFragsN; ++fn) Ops::mma(acc[fm][fn], a[fm], b[fn]);
  }
}

// The whole K loop of one CTA tile: acc = sum over K-tiles 0, 1, ... of
// x[m0:, kt] * w[n0:, kt]^T. kStages - 1 K-tiles are in flight while one is
// computed; one barrier per K-tile both publishes the arrived tile and frees
// the stage read in the previous iteration for the next copy.
template <class Ops>
__device__ __forceinline__ void mma_mainloop(
    const MmaOperandsArgs& p, TileCoord t, uint8_t* smem,
    typename Ops::Acc (&acc)[MmaTileSm80::kFragsM][MmaTileSm80::kFragsN][4]) {
  using T = MmaTileSm80;
#pragma unroll
  for (int fm = 0; fm < T::kFragsM; ++fm)
#pragma unroll
    for (int fn = 0; fn < T::kFragsN; ++fn)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[fm][fn][i] = typename Ops::Acc(0);

  const TileLoader<T::kBlockM> load_a(p.x + t.m0 * p.ldx_bytes, p.ldx_bytes, p.m - t.m0, p.k_bytes);
  const TileLoader<T::kBlockN> load_b(p.w + t.n0 * p.ldw_bytes, p.ldw_bytes, p.n - t.n0, p.k_bytes);
  const int64_t k_tiles = (p.k_bytes + T::kBlockKBytes - 1) / T::kBlockKBytes;

  auto load_stage = [&](int64_t kt, int stage) {
    uint8_t* a = smem + stage * T::kStageBytes;
    const int64_t k0 = kt * T::kBlockKBytes;
    load_a.load(a, k0, p.x_aligned);
    load_b.load(a + T::kTileBytesA, k0, p.w_aligned);
  };

  // Prologue: K-tiles 0 .. kStages-2, one commit group each (empty past K, so
  // the group count the waits rely on is always the same).
#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  int read_stage = 0, write_stage = T::kStages - 1;
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<T::kStages - 2>();  // K-tile kt has landed (this thread's copies)
    __syncthreads();                  // ... everyone's, and stage kt-1 is no longer read
    if (kt + T::kStages - 1 < k_tiles) load_stage(kt + T::kStages - 1, write_stage);
    cp_async_commit();
    const uint8_t* a = smem + read_stage * T::kStageBytes;
    mma_stage<Ops>(a, a + T::kTileBytesA, acc);
    read_stage = read_stage + 1 == T::kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == T::kStages ? 0 : write_stage + 1;
  }
  cp_async_wait<0>();  // no copy outlives the CTA (only empty groups remain)
}

// Where accumulator i of fragment (fm, fn) sits in the CTA tile: mma's C
// layout puts c0, c1 at (lane / 4, 2 * (lane % 4) + {0, 1}) and c2, c3 eight
// rows below.
struct AccPos {
  int row, col;  // of c0 (c1: col + 1; c2, c3: row + 8)
};
__device__ __forceinline__ AccPos acc_pos(int fm, int fn) {
  using T = MmaTileSm80;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int warp_m = warp % T::kWarpsM, warp_n = warp / T::kWarpsM;
  return {warp_m * T::kWarpM + fm * T::kMmaM + lane / 4,
          warp_n * T::kWarpN + fn * T::kMmaN + 2 * (lane % 4)};
}

// Store two adjacent bf16 outputs (col, col + 1) of one row, each only if it
// is inside n: one 32-bit store when both are in and the address allows it.
__device__ __forceinline__ void store_bf16_pair(uint16_t* y_row, int64_t col, int64_t n,
                                                uint16_t lo, uint16_t hi) {
  uint16_t* p = y_row + col;
  if (col + 1 < n && (reinterpret_cast<uintptr_t>(p) & 3u) == 0) {
    *reinterpret_cast<uint32_t*>(p) = uint32_t(lo) | (uint32_t(hi) << 16);
    return;
  }
  if (col < n) p[0] = lo;
  if (col + 1 < n) p[1] = hi;
}

}  // namespace h3s::cuda::gemm
