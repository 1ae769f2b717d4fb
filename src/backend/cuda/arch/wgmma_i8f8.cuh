// The 8-bit wgmma forms: the int8 GEMM's m64n256k32 s8 (gemm/gemm_i8_sm90.cu)
// and the kvi8s attention's (attn_fwd_i8s_sm90.cu): S = Q K^T on int8
// (m64n144k32, s32 accumulators: 128 keys plus the tile header's mean-digit
// rows, kvfmt/kvi8s.hpp; Q and K in shared memory) and O = P V on fp8 e4m3
// (m64n136k32 with the row sums' ones rows, fp32 accumulators, P in
// registers). sm_90a only, guarded like wgmma.cuh. 8-bit operands are
// K-major on both sides (the ISA has no transpose for them): Q, K and V^T
// rows of 128 bytes, 128-byte swizzled.
//
// The accumulator layout is wgmma.cuh's (register 4j + {0,1}: row lane/4,
// columns 8j + 2 (lane % 4) + {0,1}; 4j + {2,3}: row + 8). A k32 step's A
// fragment holds 4 bytes per register: a0 row lane/4 keys 4 (lane % 4) +
// {0..3}, a1 the same keys of row + 8, a2 / a3 the same 16 keys further.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/wgmma.cuh"

namespace h3s::cuda::wgmma {

// The 72 int32 accumulators of an m64n144 tile.
#define H3S_WGMMA_ACC72(d)                                                                      \
  H3S_WGMMA_ACC64_AS("+r", d), "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), \
      "+r"(d[69]), "+r"(d[70]), "+r"(d[71])

// d (+)= A B for m64n256k32 s8 x s8 -> s32, A and B in shared memory
// (K-major): the int8 GEMM's tiles (two m64n128 halves of operands).
// accumulate = false overwrites d.
__device__ __forceinline__ void mma_m64n256k32_s8_ss(int32_t (&d)[128], uint64_t desc_a,
                                                     uint64_t desc_b, bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 {" H3S_WGMMA_D64
      ", "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, %128, %129, p;\n}\n"
      : H3S_WGMMA_ACC64_AS("+r", d), H3S_WGMMA_ACC64_AS("+r", (d + 64))
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
#endif
}

// d (+)= A B for m64n144k32 s8 x s8 -> s32, A and B in shared memory
// (K-major). accumulate = false overwrites d.
__device__ __forceinline__ void mma_m64n144k32_s8_ss(int32_t (&d)[72], uint64_t desc_a,
                                                     uint64_t desc_b, bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %74, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n144k32.s32.s8.s8 {" H3S_WGMMA_D64
      ", %64, %65, %66, %67, %68, %69, %70, %71"
      "}, %72, %73, p;\n}\n"
      : H3S_WGMMA_ACC72(d)
      : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
#endif
}

// The 68 fp32 accumulators of an m64n136 tile.
#define H3S_WGMMA_ACC68(d) H3S_WGMMA_ACC64(d), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67])

// d (+)= A B for m64n136k32 e4m3 x e4m3 -> f32, A in registers: P V with 8
// more B rows past V^T's 128 channels (the kvi8s attention's row sums:
// rows of e4m3 ones give sum_k P[row][k] in columns 128..135).
__device__ __forceinline__ void mma_m64n136k32_e4m3_rs(float (&d)[68], const uint32_t (&a)[4],
                                                       uint64_t desc_b, bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %73, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n136k32.f32.e4m3.e4m3 {" H3S_WGMMA_D64
      ", %64, %65, %66, %67}, {%68, %69, %70, %71}, %72, p, 1, 1;\n}\n"
      : H3S_WGMMA_ACC68(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(int(accumulate)));
#else
  (void)d, (void)a, (void)desc_b, (void)accumulate;
#endif
}

#undef H3S_WGMMA_ACC72

__device__ __forceinline__ void fence_operand(int32_t& r) {
  asm volatile("" : "+r"(r)::"memory");
}

}  // namespace h3s::cuda::wgmma
