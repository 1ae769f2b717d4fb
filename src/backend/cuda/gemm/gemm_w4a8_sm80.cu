// gemm_w4a8: int8 activations x W4A8 weights, decoded to int8 inside the
// kernel. Bit-identical to gemm_i8 on decode_w4a8's int8 weights
// (model/quant_linear.cpp): the decoded shared-memory B tile holds exactly the
// bytes gemm_i8 would have copied, and the mma steps (mma_stage), the K order
// and the epilogue (store_dequantised) are gemm_i8's own.
//
// Per K-tile (128 columns) a CTA copies A (16 KiB, as gemm_i8), the packed
// codes (8 KiB) and the group scales (1 KiB) with cp.async, kStages deep.
// Each thread then decodes the 64 columns of one weight row it copied itself
// (so after its own cp.async wait, before the barrier) into one of two decoded
// B tiles, and the whole CTA multiplies A with the decoded tile after the
// K-tile's single barrier, as in gemm_i8.
//
// The decode. w8 = clamp(rne(level[code] * e4m3(s)), -127, 127) depends only
// on the scale byte s and the code, so each CTA first fills a 256 x 16 int8
// table with exactly that arithmetic (fp32 multiply, __float2int_rn, integer
// clamp: 4096 entries, 16 per thread, once per CTA). A group of 16 weights
// then costs one 16-byte table-row load, and every 8 codes become 8 int8
// weights by 6 byte permutes (prmt: two 8-entry look-ups, one select by the
// code's high bit) and 6 integer ops.
//
// Expected cost against gemm_i8 (estimated, not measured): per thread and
// K-tile the decode adds ~110 integer/permute instructions, 3 shared loads of
// own data, 4 table-row loads (data-dependent bank conflicts, ~2-3 ways) and 4
// conflict-free 16-byte stores, beside gemm_i8's 64 mma + 24 ldmatrix. The
// extra issue slots mostly fit under the tensor pipe with two CTAs per SM, so
// large M (compute-bound) should run ~1.05-1.3x gemm_i8's time; it is redone
// per M-tile (a weight tile is decoded once per 128 rows). Small M (a single
// M-tile, weight-bandwidth-bound) reads 0.5625 bytes per weight instead of 1,
// so ~0.6x gemm_i8's time. L2 -> SM traffic for the codes equals gemm_i8's
// for int8 B: a warp's 16-byte copies use half of each 32-byte sector.
#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/arch/smem_limits.hpp"
#include "backend/cuda/gemm/gemm_epilogue_sm80.cuh"
#include "backend/cuda/gemm/gemm_launch.cuh"
#include "backend/cuda/gemm/gemm_mainloop_sm80.cuh"
#include "backend/cuda/gemm/gemm_traits.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/quant/e4m3.cuh"

namespace h3s::cuda {

namespace gemm {
namespace {

using T = MmaTileSm80;
using W = W4A8TileSm80<>;  // the stage-independent layout (decode, table)

// The mainloop's operands: x as for gemm_i8; mma.w, ldw_bytes and w_aligned
// describe the packed codes (k / 2 bytes per weight row).
struct W4A8Args {
  MmaOperandsArgs mma;
  const uint8_t* s_rel;  // e4m3 [n, k / 16]
  const float* levels;   // [16]: the codebook, or code - 8
  int64_t ld_s_rel;      // k / 16
  bool s_rel_aligned;    // every scale row starts on a 4-byte boundary
};

// Row s of the table: the 16 int8 weights a group with scale byte s decodes
// to, entry c for code c, by decode_w4a8's arithmetic: the fp32 product
// level * scale, rounded to nearest-even, clamped to [-127, 127]. The integer
// conversion saturates, so clamping after it equals clamping the float (and a
// NaN scale, which the checkpoint reader refuses, gives 0).
__device__ __forceinline__ void fill_decode_table(uint8_t* table, const float* levels) {
  float level[W::kLevels];
#pragma unroll
  for (int c = 0; c < W::kLevels; ++c) level[c] = __ldg(levels + c);
#pragma unroll
  for (int i = 0; i < W::kScaleValues / T::kThreads; ++i) {
    const int s = int(threadIdx.x) + i * T::kThreads;
    const float scale = e4m3_to_f32(uint32_t(s));
    uint32_t word[W::kLevels / 4] = {};
#pragma unroll
    for (int c = 0; c < W::kLevels; ++c) {
      const int q = min(max(__float2int_rn(__fmul_rn(level[c], scale)), -127), 127);
      word[c / 4] |= (uint32_t(q) & 0xffu) << (8 * (c % 4));
    }
    *reinterpret_cast<uint4*>(table + s * W::kLevels) =
        make_uint4(word[0], word[1], word[2], word[3]);
  }
}

// Byte permute: byte i of the result is byte sel[4i+2 : 4i] of {b, a} (a
// holds bytes 0-3). The selectors below never set a nibble's bit 3 (sign
// replication), and only sel's low 16 bits are read.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// Eight codes (nibble i = column i) to eight int8 weights (.x: columns 0-3,
// .y: 4-7) through one table row (entry c is byte c % 4 of word c / 4).
__device__ __forceinline__ uint2 decode8(uint32_t codes, uint4 row) {
  const uint32_t idx = codes & 0x77777777u;          // entry within an 8-entry half
  const uint32_t high = (codes >> 1) & 0x44444444u;  // 4 where the code is >= 8
  const uint32_t idx_hi = idx >> 16, high_hi = high >> 16;
  constexpr uint32_t kIdentity = 0x3210u;  // + 4: the same byte of the upper half's result
  uint2 r;
  r.x = prmt(prmt(row.x, row.y, idx), prmt(row.z, row.w, idx), high | kIdentity);
  r.y = prmt(prmt(row.x, row.y, idx_hi), prmt(row.z, row.w, idx_hi), high_hi | kIdentity);
  return r;
}

// Copies and decodes the packed B tile. Thread t owns half t % 2 of weight
// row t / 2 of every K-tile: 32 code bytes (64 columns) and their 4 scale
// bytes, and decodes them into int8 chunks 4 (t % 2) .. +3 of that row of the
// swizzled B tile. Only its owner reads a thread's packed bytes, so they are
// stored thread-major (code chunk j of all threads, then chunk j + 1; scale
// words likewise), where a warp's 16-byte copies and loads are contiguous:
// free of bank conflicts. Codes or scales past n or past k are zero-filled;
// they decode to some int8 that meets only zero-filled A columns or unstored
// outputs.
struct PackedLoader {
  static constexpr int kCodeChunkStride = T::kThreads * T::kChunkBytes;
  static_assert(kCodeChunkStride * W::kCodeChunksPerThread == W::kTileBytesCodes &&
                    T::kThreads * W::kScaleBytesPerThread == W::kTileBytesScales,
                "thread-major packed tiles fill the stage's packed tiles exactly");

  const uint8_t* codes_base;   // the tile's first row: a legal zero-fill address
  const uint8_t* codes_src;    // this thread's first code byte, K-tile 0
  const uint8_t* scales_base;  // the same for the scales
  const uint8_t* scales_src;
  int64_t codes_left;    // code bytes from this thread's first to the row's end
  int64_t scales_left;   // the same for scale bytes
  uint32_t code_off;     // this thread's first code chunk in a stage's packed tile
  uint32_t scale_off;    // its scale word in the stage's scale tile
  int row, first_chunk;  // its row and first int8 chunk of the decoded tile
  bool row_ok;           // the row is inside n

  __device__ PackedLoader(const W4A8Args& p, int64_t n0) {
    const int t = int(threadIdx.x);
    const int part = t % W::kThreadsPerRow;
    row = t / W::kThreadsPerRow;
    first_chunk = part * W::kDecodedChunksPerThread;
    row_ok = row < p.mma.n - n0;
    codes_base = p.mma.w + n0 * p.mma.ldw_bytes;
    codes_src = codes_base + row * p.mma.ldw_bytes + part * W::kCodeBytesPerThread;
    codes_left = p.mma.ldw_bytes - part * W::kCodeBytesPerThread;
    scales_base = p.s_rel + n0 * p.ld_s_rel;
    scales_src = scales_base + row * p.ld_s_rel + part * W::kScaleBytesPerThread;
    scales_left = p.ld_s_rel - part * W::kScaleBytesPerThread;
    code_off = uint32_t(t * T::kChunkBytes);
    scale_off = uint32_t(t * W::kScaleBytesPerThread);
  }

  // K-tile kt into a stage's packed tiles. Rows or scale rows off their
  // cp.async alignment are gathered with byte loads: the same bytes land.
  __device__ __forceinline__ void load(uint8_t* codes, uint8_t* scales, int64_t kt,
                                       bool codes_aligned, bool scales_aligned) const {
    const int64_t c0 = kt * W::kCodeRowBytes, s0 = kt * W::kScaleRowBytes;
#pragma unroll
    for (int j = 0; j < W::kCodeChunksPerThread; ++j) {
      const int64_t at = c0 + j * T::kChunkBytes;
      const bool valid = row_ok && at < codes_left;
      const uint8_t* g = valid ? codes_src + at : codes_base;
      uint8_t* d = codes + code_off + j * kCodeChunkStride;
      if (codes_aligned) {
        cp_async_16(smem_addr(d), g, valid);
      } else {
        uint32_t v[4] = {0u, 0u, 0u, 0u};
        if (valid) {
#pragma unroll
          for (int b = 0; b < T::kChunkBytes; ++b) v[b / 4] |= uint32_t(g[b]) << (8 * (b % 4));
        }
        *reinterpret_cast<uint4*>(d) = make_uint4(v[0], v[1], v[2], v[3]);
      }
    }
    uint8_t* d = scales + scale_off;
    if (scales_aligned) {
      // Rows of k / 16 bytes, a multiple of 4: a word is wholly in or out.
      const bool valid = row_ok && s0 < scales_left;
      cp_async_4(smem_addr(d), valid ? scales_src + s0 : scales_base, valid);
    } else {
      uint32_t v = 0u;
#pragma unroll
      for (int b = 0; b < W::kScaleBytesPerThread; ++b)
        if (row_ok && s0 + b < scales_left) v |= uint32_t(scales_src[s0 + b]) << (8 * b);
      *reinterpret_cast<uint32_t*>(d) = v;
    }
  }

  // This thread's packed bytes of a stage (its own copies: visible after its
  // cp.async wait) into the int8 B tile `decoded`, in gemm_i8's swizzle.
  __device__ __forceinline__ void decode(const uint8_t* codes, const uint8_t* scales,
                                         const uint8_t* table, uint8_t* decoded) const {
    static_assert(W::kCodeChunksPerThread == 2 && W::kGroupsPerThread == 4,
                  "the loads below read 2 code chunks and one scale word");
    const uint4 c0 = *reinterpret_cast<const uint4*>(codes + code_off);
    const uint4 c1 = *reinterpret_cast<const uint4*>(codes + code_off + kCodeChunkStride);
    const uint32_t s = *reinterpret_cast<const uint32_t*>(scales + scale_off);
    const uint32_t words[2 * W::kGroupsPerThread] = {c0.x, c0.y, c0.z, c0.w,
                                                     c1.x, c1.y, c1.z, c1.w};
#pragma unroll
    for (int g = 0; g < W::kGroupsPerThread; ++g) {
      const uint32_t byte = (s >> (8 * g)) & 0xffu;
      const uint4 entry = *reinterpret_cast<const uint4*>(table + byte * W::kLevels);
      // One group = 16 columns = one 16-byte int8 chunk.
      const uint2 lo = decode8(words[2 * g], entry), hi = decode8(words[2 * g + 1], entry);
      *reinterpret_cast<uint4*>(decoded + T::swizzle(row, first_chunk + g)) =
          make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
  }
};
static_assert(W::kGroup == T::kChunkBytes, "one group decodes to one int8 chunk");

// mma_mainloop with B decoded in shared memory. Stage slots and the cp.async
// group count are mma_mainloop's; the decoded tiles alternate, so the tile
// decoded for K-tile kt was last read by the mma of kt - 2, which every
// thread finished before the barrier of kt - 1.
template <class WS>
__device__ __forceinline__ void w4a8_mainloop(const W4A8Args& p, TileCoord t, uint8_t* smem,
                                              int32_t (&acc)[T::kFragsM][T::kFragsN][4]) {
  static_assert(W::kDecodedTiles == 2, "decoded tiles alternate by K-tile parity");
#pragma unroll
  for (int fm = 0; fm < T::kFragsM; ++fm)
#pragma unroll
    for (int fn = 0; fn < T::kFragsN; ++fn)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[fm][fn][i] = 0;

  const MmaOperandsArgs& a = p.mma;
  const TileLoader<T::kBlockM> load_a(a.x + t.m0 * a.ldx_bytes, a.ldx_bytes, a.m - t.m0, a.k_bytes);
  const PackedLoader load_b(p, t.n0);
  const int64_t k_tiles = (a.k_bytes + T::kBlockKBytes - 1) / T::kBlockKBytes;

  auto load_stage = [&](int64_t kt, int stage) {
    uint8_t* s = smem + stage * W::kStageBytes;
    load_a.load(s, kt * T::kBlockKBytes, a.x_aligned);
    load_b.load(s + T::kTileBytesA, s + T::kTileBytesA + W::kTileBytesCodes, kt, a.w_aligned,
                p.s_rel_aligned);
  };

#pragma unroll
  for (int s = 0; s < WS::kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  // The table is filled while the first K-tiles are in flight.
  uint8_t* table = smem + WS::kTableOffset;
  fill_decode_table(table, p.levels);
  __syncthreads();  // the decode table is complete
  int read_stage = 0, write_stage = WS::kStages - 1;
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<WS::kStages - 2>();  // this thread's copies of K-tile kt have landed
    const uint8_t* s = smem + read_stage * W::kStageBytes;
    uint8_t* b = smem + WS::kDecodedOffset + int(kt & 1) * T::kTileBytesB;
    load_b.decode(s + T::kTileBytesA, s + T::kTileBytesA + W::kTileBytesCodes, table, b);
    __syncthreads();  // A of kt and the decoded B are complete; stage kt-1 is no longer read
    if (kt + WS::kStages - 1 < k_tiles) load_stage(kt + WS::kStages - 1, write_stage);
    cp_async_commit();
    mma_stage<S8Operands>(s, b, acc);
    read_stage = read_stage + 1 == WS::kStages ? 0 : read_stage + 1;
    write_stage = write_stage + 1 == WS::kStages ? 0 : write_stage + 1;
  }
  cp_async_wait<0>();  // no copy outlives the CTA (only empty groups remain)
}

template <class WS>
__global__ void __launch_bounds__(T::kThreads, T::kMinCtasPerSm)
    gemm_w4a8_m128n128k128_sm80(W4A8Args p, const float* xs, const float* ws, const float* bias,
                                uint16_t* y, int64_t ldy) {
  extern __shared__ __align__(128) uint8_t smem[];
  const TileCoord t = tile_coord(blockIdx.x, p.mma.tiles_m, p.mma.tiles_n);
  int32_t acc[T::kFragsM][T::kFragsN][4];
  w4a8_mainloop<WS>(p, t, smem, acc);
  store_dequantised(acc, t, p.mma.m, p.mma.n, xs, ws, bias, y, ldy);
}

}  // namespace
}  // namespace gemm

void gemm_w4a8(const int8_t* xq, int64_t ldx, const float* xs, const uint8_t* w_codes,
               const uint8_t* w_s_rel, const float* levels, const float* ws, const float* bias,
               uint16_t* y, int64_t ldy, int64_t m, int64_t n, int64_t k, GemmKernel want,
               cudaStream_t s) {
  using W = gemm::W4A8TileSm80<>;
  constexpr const char* op = "gemm_w4a8";
  if (!gemm::check_gemm_shape(op, m, n, k, ldx, ldy)) return;
  gemm::check_k_multiple(op, k, W::kKMultiple);
  gemm::W4A8Args p{};
  p.mma = gemm::make_mma_args<gemm::S8Operands>(op, xq, ldx,
                                                reinterpret_cast<const int8_t*>(w_codes), m, n, k);
  // B is packed: k / 2 code bytes and k / 16 scale bytes per weight row.
  p.mma.ldw_bytes = k / 2;
  p.mma.w_aligned = gemm::rows_aligned_16(w_codes, p.mma.ldw_bytes);
  p.s_rel = w_s_rel;
  p.ld_s_rel = k / W::kGroup;
  p.s_rel_aligned = reinterpret_cast<uintptr_t>(w_s_rel) % 4 == 0 && p.ld_s_rel % 4 == 0;
  p.levels = levels;
  using W2 = gemm::W4A8TileSm80<2>;
  using W3 = gemm::W4A8TileSm80<3>;
  // Two stages run wherever a block may take 99 KiB (sm_86/89/120); three only
  // where arch::max_dynamic_smem_bytes() says they fit (choose_w4a8: A100, Hopper).
  static_assert(W2::kSmemBytes <= arch::kSmemOptInSm86,
                "exceeds the shared memory a block may take on sm_86/89/120");
  static_assert(W3::kSmemBytes <= arch::kSmemOptInSm80,
                "exceeds the shared memory a block may take on sm_80");
  if (gemm::gemm_w4a8_choice(op, want, arch::max_dynamic_smem_bytes(), W3::kSmemBytes,
                             W2::kSmemBytes) == Kernel::gemm_w4a8_s3)
    gemm::launch_tiles(op, gemm::gemm_w4a8_m128n128k128_sm80<W3>, W3::kSmemBytes,
                       p.mma.tiles_m * p.mma.tiles_n, s, p, xs, ws, bias, y, ldy);
  else
    gemm::launch_tiles(op, gemm::gemm_w4a8_m128n128k128_sm80<W2>, W2::kSmemBytes,
                       p.mma.tiles_m * p.mma.tiles_n, s, p, xs, ws, bias, y, ldy);
}

}  // namespace h3s::cuda
