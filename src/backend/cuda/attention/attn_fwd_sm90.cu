// Design: Hopper (sm_90a) attention forward for head_dim 128, bf16 Q/K/V and
// the same fp32 online-softmax state as the mma.sync kernel (attn_state.cuh),
// on warpgroup MMAs. Grid (ceil(rows / 128), heads); a CTA of two warpgroups
// owns 128 query rows, 64 per warpgroup. Q sits in shared memory for the
// whole key loop; K/V stream through a cp.async double buffer in 128-key
// tiles, in increasing key order from key_begin, the last tile masked at
// key_end. Per tile and warpgroup:
//   S[64 x 128] = Q K^T        8 x wgmma m64n128k16 (A, B from shared, K-major)
//   online softmax on S        exp2 form, per row, in registers (attn_state.cuh)
//   O[64 x 128] += P V         8 x wgmma m64n128k16 (P from registers as bf16,
//                              V from shared, MN-major)
// The two warpgroups of a CTA (and the SM's schedulers) overlap one's softmax
// with the other's MMAs; there is no producer warp or TMA yet (FA3's
// warp specialisation and ping-pong are the next steps, see PERFORMANCE.md).
//
// Exactness: every shape is a constant; a row's arithmetic (the k-order of
// its wgmmas, its softmax updates, the key tiles from key_begin) never depends
// on how many rows share the call or where its CTA starts. K/V blocks that
// start on a 128-key boundary (kAttnKvTile) continue the single pass bit for
// bit, since the state is loaded and stored unchanged in fp32.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/arch/mma_sm80.cuh"
#include "backend/cuda/arch/wgmma.cuh"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/attention/attn_state.cuh"
#include "backend/cuda/common.cuh"

namespace h3s::cuda::attn {
// A named namespace (not an anonymous one): the portable compute_90 pass
// compiles the kernel body away, and nvcc warns about unreferenced
// internal-linkage helpers.
namespace sm90 {

struct Sm90Traits {
  static constexpr int kHeadDim = 128;
  static constexpr int kWarpGroups = 2;
  static constexpr int kThreads = kWarpGroups * 128;
  static constexpr int kGroupRows = 64;  // wgmma M
  static constexpr int kBlockM = kWarpGroups * kGroupRows;
  static constexpr int kBlockN = 128;  // keys per tile = wgmma N of S
  static constexpr int kMmaK = 16;
  static constexpr int kStages = 2;

  // A row of 128 bf16 is two 128-byte swizzle rows: tiles are stored as two
  // "halves" [rows][64 dims], each a stack of 1024-byte swizzle atoms.
  static constexpr int kElemBytes = 2;
  static constexpr int kHalfDims = wgmma::kSwizzleBytes / kElemBytes;  // 64
  static constexpr int kHalves = kHeadDim / kHalfDims;                 // 2
  static constexpr int kChunkElems = 16 / kElemBytes;                  // 8 per 16-byte chunk
  static constexpr int kChunksPerHalfRow = kHalfDims / kChunkElems;    // 8
  static constexpr int kChunksPerRow = kHeadDim / kChunkElems;         // 16

  static constexpr uint32_t kQHalfBytes = uint32_t(kBlockM) * wgmma::kSwizzleBytes;   // 16 KiB
  static constexpr uint32_t kKvHalfBytes = uint32_t(kBlockN) * wgmma::kSwizzleBytes;  // 16 KiB
  static constexpr uint32_t kQBytes = kHalves * kQHalfBytes;
  static constexpr uint32_t kKvTileBytes = kHalves * kKvHalfBytes;
  static constexpr size_t kSmemBytes =
      size_t(kQBytes) + size_t(2 * kStages) * kKvTileBytes + wgmma::kAtomBytes;  // + align slack

  static constexpr int kQkSteps = kHeadDim / kMmaK;        // 8: k over head dims
  static constexpr int kStepsPerHalf = kHalfDims / kMmaK;  // 4 k16 steps per 128-byte row
  static constexpr int kPvSteps = kBlockN / kMmaK;         // 8: k over keys
  static constexpr int kSBlocks = kBlockN / 8;             // n8 score blocks per row
  static constexpr int kOBlocks = kHeadDim / 8;            // n8 output blocks per row

  static_assert(kBlockN == 128 && kHeadDim == 128, "the wgmma shapes below are m64n128k16");
  static_assert(kBlockM * kChunksPerRow % kThreads == 0 && kBlockN * kChunksPerRow % kThreads == 0);
  static_assert(kSmemBytes <= 227 * 1024, "exceeds the sm_90 per-block shared memory opt-in");
};
using T = Sm90Traits;

// Byte offset of (row, 16-byte chunk c of the full 256-byte row) in a
// two-half swizzled tile whose halves are `half_bytes` apart.
__device__ __forceinline__ uint32_t tile_offset(int row, int c, uint32_t half_bytes) {
  const int half = c / T::kChunksPerHalfRow, hc = c % T::kChunksPerHalfRow;
  return uint32_t(half) * half_bytes + uint32_t(row * wgmma::kSwizzleBytes) +
         uint32_t((hc ^ (row % wgmma::kAtomRows)) * 16);
}

__device__ __forceinline__ void load_q(uint32_t sq, const FwdParams& p, int64_t row0,
                                       int64_t head) {
  const uint16_t* base = p.q + row0 * p.ldq + head * T::kHeadDim;
#pragma unroll
  for (int i = 0; i < T::kBlockM * T::kChunksPerRow / T::kThreads; ++i) {
    const int idx = int(threadIdx.x) + i * T::kThreads;
    const int r = idx / T::kChunksPerRow, c = idx % T::kChunksPerRow;
    const bool valid = row0 + r < p.rows;
    const uint16_t* src = base + (valid ? int64_t(r) * p.ldq + c * T::kChunkElems : 0);
    arch::cp_async_16(sq + tile_offset(r, c, T::kQHalfBytes), src, valid);
  }
}

// Keys >= key_end read the last key (in range) instead; their scores are
// masked to -inf, so they add exactly 0 to l and to O.
__device__ __forceinline__ void load_kv(uint32_t sk, uint32_t sv, const uint16_t* kh,
                                        const uint16_t* vh, const FwdParams& p, int64_t key0) {
#pragma unroll
  for (int i = 0; i < T::kBlockN * T::kChunksPerRow / T::kThreads; ++i) {
    const int idx = int(threadIdx.x) + i * T::kThreads;
    const int r = idx / T::kChunksPerRow, c = idx % T::kChunksPerRow;
    const int64_t key = key0 + r < p.key_end ? key0 + r : p.key_end - 1;
    const int64_t off = key * p.kv_seq_stride + c * T::kChunkElems;
    const uint32_t o = tile_offset(r, c, T::kKvHalfBytes);
    arch::cp_async_16(sk + o, kh + off, true);
    arch::cp_async_16(sv + o, vh + off, true);
  }
}

}  // namespace sm90
namespace {
using sm90::T;
using sm90::tile_offset;

__global__ void __launch_bounds__(T::kThreads, 1) attn_fwd_bf16_m128n128_sm90(const FwdParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  // Swizzle atoms must start on 1024-byte boundaries (the XOR uses address bits).
  const uint32_t base =
      (arch::smem_addr(smem_raw) + wgmma::kAtomBytes - 1) & ~uint32_t(wgmma::kAtomBytes - 1);
  const uint32_t sq = base;
  const uint32_t sk0 = sq + T::kQBytes;
  const uint32_t sv0 = sk0 + T::kStages * T::kKvTileBytes;

  const int tid = int(threadIdx.x);
  const int group = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int64_t row0 = int64_t(blockIdx.x) * T::kBlockM;
  const int64_t head = blockIdx.y;
  const uint16_t* kh = p.k + head * p.kv_head_stride;
  const uint16_t* vh = p.v + head * p.kv_head_stride;
  const int n_tiles = int((p.key_end - p.key_begin + T::kBlockN - 1) / T::kBlockN);

  sm90::load_q(sq, p, row0, head);
  arch::cp_async_commit();
  sm90::load_kv(sk0, sv0, kh, vh, p, p.key_begin);
  arch::cp_async_commit();

  // This thread's rows: g and g + 8 of its warp's 16-row slab of its group's 64.
  const int g = lane / 4, col = 2 * (lane % 4);
  const int64_t lane_row0 = row0 + group * T::kGroupRows + warp * 16 + g;
  OnlineSoftmax state;
  float acc[T::kOBlocks * 4];
#pragma unroll
  for (int r = 0; r < OnlineSoftmax::kRows; ++r) {
    const int64_t row = lane_row0 + r * 8;
    const bool in_range = row < p.rows;
    const int64_t sh = row * p.heads + head;
    state.m[r] = in_range ? p.m[sh] : -kInf;
    state.l[r] = in_range ? p.l[sh] : 0.0f;
#pragma unroll
    for (int n = 0; n < T::kOBlocks; ++n) {
      float2 a = make_float2(0.0f, 0.0f);
      if (in_range) a = *reinterpret_cast<const float2*>(p.acc + sh * T::kHeadDim + n * 8 + col);
      acc[4 * n + 2 * r] = a.x;
      acc[4 * n + 2 * r + 1] = a.y;
    }
  }

  // Descriptors. Q (A of S, K-major): this group's 64 rows start 64 * 128 B
  // into each half; K (B of S, K-major): 128 key rows. For both, 8-row atoms
  // are SBO = 1024 B apart and a k16 step moves 32 B along the 128-byte row.
  // V (B of O, MN-major: dims contiguous): one k16 step is 16 keys = two atoms
  // (2048 B); the second 64 dims are the other half, LBO = one half away.
  const uint32_t q_group = sq + uint32_t(group * T::kGroupRows * wgmma::kSwizzleBytes);
  constexpr uint32_t kStepBytes = T::kMmaK * T::kElemBytes;  // 32

  for (int t = 0; t < n_tiles; ++t) {
    const int64_t key0 = p.key_begin + int64_t(t) * T::kBlockN;
    if (t + 1 < n_tiles) {
      const uint32_t next = uint32_t((t + 1) % T::kStages) * T::kKvTileBytes;
      sm90::load_kv(sk0 + next, sv0 + next, kh, vh, p, key0 + T::kBlockN);
    }
    arch::cp_async_commit();
    arch::cp_async_wait<1>();
    wgmma::fence_proxy_async_smem();  // cp.async data -> visible to wgmma
    __syncthreads();
    const uint32_t stage = uint32_t(t % T::kStages) * T::kKvTileBytes;
    const uint32_t sk = sk0 + stage, sv = sv0 + stage;

    // S = Q K^T, k over head dims in order.
    float s[T::kSBlocks * 4];
#pragma unroll
    for (int i = 0; i < T::kSBlocks * 4; ++i) {
      s[i] = 0.0f;  // overwritten by the first k-step (scale-d 0); defined for the compiler
      wgmma::fence_operand(s[i]);
    }
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < T::kQkSteps; ++kk) {
      const uint32_t in_half = uint32_t(kk / T::kStepsPerHalf),
                     step = uint32_t(kk % T::kStepsPerHalf) * kStepBytes;
      const uint64_t da =
          wgmma::make_desc(q_group + in_half * T::kQHalfBytes + step, 0, wgmma::kAtomBytes);
      const uint64_t db =
          wgmma::make_desc(sk + in_half * T::kKvHalfBytes + step, 0, wgmma::kAtomBytes);
      wgmma::mma_m64n128k16_ss(s, da, db, kk > 0);
    }
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int i = 0; i < T::kSBlocks * 4; ++i) wgmma::fence_operand(s[i]);

    // Scale like the reference, mask keys past key_end (uniform per tile).
    float sc[T::kSBlocks][4];
#pragma unroll
    for (int n = 0; n < T::kSBlocks; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[n][i] = __fmul_rn(s[4 * n + i], AttnScale::kSoftmaxScale);
    if (key0 + T::kBlockN > p.key_end) {
      const int valid_keys = int(p.key_end - key0);
#pragma unroll
      for (int n = 0; n < T::kSBlocks; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (n * 8 + col + i % 2 >= valid_keys) sc[n][i] = -kInf;
    }

    float alpha[OnlineSoftmax::kRows];
    state.consume(sc, alpha);
#pragma unroll
    for (int n = 0; n < T::kOBlocks; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[4 * n + i] = __fmul_rn(acc[4 * n + i], alpha[i / 2]);

    // O += P V: P's k16 step kk is score blocks 2kk, 2kk + 1 rounded to bf16.
    // All A fragments are packed before the fence, so no register the MMAs
    // read is written while they are in flight.
    uint32_t pa[T::kPvSteps][4];
#pragma unroll
    for (int kk = 0; kk < T::kPvSteps; ++kk) {
      pa[kk][0] = arch::pack_bf16x2(sc[2 * kk][0], sc[2 * kk][1]);
      pa[kk][1] = arch::pack_bf16x2(sc[2 * kk][2], sc[2 * kk][3]);
      pa[kk][2] = arch::pack_bf16x2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]);
      pa[kk][3] = arch::pack_bf16x2(sc[2 * kk + 1][2], sc[2 * kk + 1][3]);
    }
#pragma unroll
    for (int i = 0; i < T::kOBlocks * 4; ++i) wgmma::fence_operand(acc[i]);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < T::kPvSteps; ++kk) {
      const uint64_t db = wgmma::make_desc(sv + uint32_t(kk) * 2 * wgmma::kAtomBytes,
                                           T::kKvHalfBytes, wgmma::kAtomBytes);
      wgmma::mma_m64n128k16_rs_tnspb(acc, pa[kk], db);
    }
    wgmma::commit();
    wgmma::wait<0>();
#pragma unroll
    for (int i = 0; i < T::kOBlocks * 4; ++i) wgmma::fence_operand(acc[i]);
    __syncthreads();  // both groups are done with this stage before it is refilled
  }
  arch::cp_async_wait<0>();

#pragma unroll
  for (int r = 0; r < OnlineSoftmax::kRows; ++r) {
    const int64_t row = lane_row0 + r * 8;
    if (row >= p.rows) continue;
    const int64_t sh = row * p.heads + head;
    if (lane % 4 == 0) {
      p.m[sh] = state.m[r];
      p.l[sh] = state.l[r];
    }
#pragma unroll
    for (int n = 0; n < T::kOBlocks; ++n)
      *reinterpret_cast<float2*>(p.acc + sh * T::kHeadDim + n * 8 + col) =
          make_float2(acc[4 * n + 2 * r], acc[4 * n + 2 * r + 1]);
  }
#else
  (void)p;
  __trap();  // never launched: the launcher selects this kernel on sm_90 only
#endif
}

}  // namespace

void attention_fwd_sm90(const FwdParams& p, cudaStream_t s) {
  cudaFuncSetAttribute(attn_fwd_bf16_m128n128_sm90, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       int(T::kSmemBytes));
  const dim3 grid(unsigned((p.rows + T::kBlockM - 1) / T::kBlockM), unsigned(p.heads));
  attn_fwd_bf16_m128n128_sm90<<<grid, T::kThreads, T::kSmemBytes, s>>>(p);
  check_launch("attn_fwd_bf16_m128n128_sm90");
}

}  // namespace h3s::cuda::attn
