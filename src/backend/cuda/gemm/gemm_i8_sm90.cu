// gemm_i8 on Hopper: y = bf16((float(acc) * xs[m]) * ws[n]) (+ bias[n]) with
// int8 warpgroup MMAs (wgmma m64n256k32 s8 -> s32) over the mma.sync GEMM's
// loader and 128-byte XOR-swizzled K-tiles, which are wgmma's 128-byte
// swizzle once the stages sit on 1024-byte boundaries (as gemm_bf16_sm90.cu).
// A CTA tile is 128 rows x 256 columns; each of its two warpgroups owns 64
// rows and per K-tile issues four k32 wgmmas from shared memory.
//
// Bits: the int32 sums are exact whatever the order of the products, and the
// epilogue is gemm_i8's per element (DequantCols), so every output is the
// mma.sync kernel's bit for bit (tested against the int32 reference), and
// row-invariant for the same reason.
//
// The pipeline (I8Sm90Pipe), n256s4p2w1 (kernel_choice.hpp: the fastest in
// the int8 block on the H200): four 48 KiB shared stages, tiles copied
// kPrefetch = 2 K-tiles ahead of the MMAs, and kInFlight = 1 group of wgmmas
// left running across the next K-tile's barrier; one CTA an SM. A stage is
// refilled only once the MMAs that read it have retired, hence kPrefetch +
// kInFlight + 1 <= kStages. The pipelines that lost and their figures:
// bench/results/experiments/removed_gemm_i8_variants.diff, docs/PERFORMANCE.md
// "The GEMMs".
#include <cuda_runtime.h>

#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/arch/wgmma_i8f8.cuh"
#include "backend/cuda/gemm/gemm_epilogue_sm80.cuh"
#include "backend/cuda/gemm/gemm_launch.cuh"
#include "backend/cuda/gemm/gemm_mainloop_sm80.cuh"
#include "backend/cuda/gemm/gemm_traits.cuh"

namespace h3s::cuda::gemm {
namespace sm90 {  // named: the host pass sees the traits unreferenced

struct I8Sm90Pipe {
  using T = MmaTileSm80;
  static constexpr int kBlockN = 256;  // twice the mma.sync tile's columns per A tile
  static constexpr int kStages = 4;
  static constexpr int kPrefetch = 2;
  static constexpr int kInFlight = 1;
  static constexpr int kCtasPerSm = 1;
  static constexpr int kWarpGroups = T::kThreads / 128;         // 2
  static constexpr int kGroupRows = T::kBlockM / kWarpGroups;   // 64: one wgmma M
  static constexpr int kMmaKBytes = 32;                         // k32 of int8
  static constexpr int kKSteps = T::kBlockKBytes / kMmaKBytes;  // 4 per K-tile
  static constexpr int kAccRegs = kBlockN / 8 * 4;              // 128 int32 per thread
  static constexpr int kTileBytesB = kBlockN * T::kBlockKBytes;
  static constexpr int kStageBytes = T::kTileBytesA + kTileBytesB;
  // + one swizzle atom of slack: the stages must start on 1024-byte boundaries.
  static constexpr int kSmemBytes = kStages * kStageBytes + wgmma::kAtomBytes;
  static_assert(kPrefetch >= 1 && kInFlight >= 0 && kPrefetch + kInFlight + 1 <= kStages,
                "a stage is refilled only after the MMAs reading it retired");
  static_assert(kGroupRows == 64 && kBlockN == 256, "the MMA is m64n256k32");
  static_assert(T::kBlockKBytes == wgmma::kSwizzleBytes,
                "a K-tile row is one 128-byte swizzle row (the loader's XOR is wgmma's swizzle)");
  static_assert(T::kTileBytesA % wgmma::kAtomBytes == 0 && kStageBytes % wgmma::kAtomBytes == 0,
                "tiles must stay on swizzle-atom boundaries");
  static_assert(kCtasPerSm * kSmemBytes <= 227 * 1024, "shared memory per SM (sm_90)");
};

}  // namespace sm90
namespace {

using T = MmaTileSm80;
using P = sm90::I8Sm90Pipe;

__global__ void __launch_bounds__(T::kThreads, P::kCtasPerSm)
    gemm_i8_sm90_kernel(MmaOperandsArgs p, const float* xs, const float* ws, const float* bias,
                        uint16_t* y, int64_t ldy) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((wgmma::kAtomBytes - smem_addr(smem_raw) % wgmma::kAtomBytes) %
                              wgmma::kAtomBytes);
  const TileCoord t = tile_coord<P::kBlockN>(blockIdx.x, p.tiles_m, p.tiles_n);
  const int group = int(threadIdx.x) / 128;
  int32_t acc[P::kAccRegs];
#pragma unroll
  for (int i = 0; i < P::kAccRegs; ++i) acc[i] = 0;

  const TileLoader<T::kBlockM> load_a(p.x + t.m0 * p.ldx_bytes, p.ldx_bytes, p.m - t.m0, p.k_bytes);
  const TileLoader<P::kBlockN> load_b(p.w + t.n0 * p.ldw_bytes, p.ldw_bytes, p.n - t.n0, p.k_bytes);
  const int64_t k_tiles = (p.k_bytes + T::kBlockKBytes - 1) / T::kBlockKBytes;
  auto load_stage = [&](int64_t kt) {
    uint8_t* a = smem + int(kt % P::kStages) * P::kStageBytes;
    const int64_t k0 = kt * T::kBlockKBytes;
    load_a.load(a, k0, p.x_aligned);
    load_b.load(a + T::kTileBytesA, k0, p.w_aligned);
  };
#pragma unroll
  for (int s = 0; s < P::kPrefetch; ++s) {
    if (s < k_tiles) load_stage(s);
    cp_async_commit();
  }
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<P::kPrefetch - 1>();  // this thread's copies of tile kt landed
    wgmma::fence_proxy_async_smem();    // cp.async / st.shared data -> visible to wgmma
    // Everyone's tile kt is in, and every warpgroup's MMAs before kt -
    // kInFlight retired (last iteration's wait): their stages may be refilled.
    __syncthreads();
    if (kt + P::kPrefetch < k_tiles) load_stage(kt + P::kPrefetch);
    cp_async_commit();
    const int stage = int(kt % P::kStages);
    const uint32_t a = smem_addr(smem + stage * P::kStageBytes) +
                       uint32_t(group * P::kGroupRows * T::kBlockKBytes);
    const uint32_t b = smem_addr(smem + stage * P::kStageBytes + T::kTileBytesA);
#pragma unroll
    for (int i = 0; i < P::kAccRegs; ++i) wgmma::fence_operand(acc[i]);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < P::kKSteps; ++kk) {
      const uint64_t da = wgmma::make_desc(a + uint32_t(kk * P::kMmaKBytes), 0, wgmma::kAtomBytes);
      const uint64_t db = wgmma::make_desc(b + uint32_t(kk * P::kMmaKBytes), 0, wgmma::kAtomBytes);
      wgmma::mma_m64n256k32_s8_ss(acc, da, db, true);
    }
    wgmma::commit();
    wgmma::wait<P::kInFlight>();
#pragma unroll
    for (int i = 0; i < P::kAccRegs; ++i) wgmma::fence_operand(acc[i]);
  }
  wgmma::wait<0>();
#pragma unroll
  for (int i = 0; i < P::kAccRegs; ++i) wgmma::fence_operand(acc[i]);
  cp_async_wait<0>();

  // Accumulator 4j + {0,1}: row r, columns 8j + col + {0,1}; 4j + {2,3}: row r + 8.
  const int warp = (int(threadIdx.x) % 128) / 32, lane = int(threadIdx.x) % 32;
  const int64_t row0 = t.m0 + group * P::kGroupRows + warp * 16 + lane / 4;
  const int col = 2 * (lane % 4);
  float row_scale[2];
#pragma unroll
  for (int half = 0; half < 2; ++half)
    row_scale[half] = row0 + 8 * half < p.m ? xs[row0 + 8 * half] : 0.0f;
#pragma unroll
  for (int j = 0; j < P::kBlockN / 8; ++j) {
    const int64_t c = t.n0 + 8 * j + col;
    const DequantCols dc = DequantCols::at(c, p.n, ws, bias);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t row = row0 + 8 * half;
      if (row >= p.m) continue;
      dc.store(y + row * ldy, c, p.n, acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1],
               row_scale[half]);
    }
  }
#else
  (void)p, (void)xs, (void)ws, (void)bias, (void)y, (void)ldy;
  __trap();  // never launched: gemm_i8 selects this kernel on sm_90 only
#endif
}

}  // namespace

void gemm_i8_sm90(const MmaOperandsArgs& args, const float* xs, const float* ws, const float* bias,
                  uint16_t* y, int64_t ldy, cudaStream_t s) {
  MmaOperandsArgs p = args;
  p.tiles_n = (p.n + P::kBlockN - 1) / P::kBlockN;  // make_mma_args counted 128-wide tiles
  launch_tiles("gemm_i8", gemm_i8_sm90_kernel, P::kSmemBytes, p.tiles_m * p.tiles_n, s, p, xs, ws,
               bias, y, ldy);
}

}  // namespace h3s::cuda::gemm
