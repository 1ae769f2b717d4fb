// Hopper warpgroup MMA (wgmma) building blocks for the sm90 attention
// forward: shared-memory matrix descriptors for 128-byte-swizzled tiles and
// the two m64n128k16 bf16 -> fp32 forms it issues (both operands in shared
// memory; A in registers), in bf16 or f16. PTX ISA 8.0+, sm_90a only: every body is guarded
// by __CUDA_ARCH_FEAT_SM90_ALL so the portable compute_90 PTX still builds
// (the launcher never selects this kernel there).
//
// Accumulator layout of m64nNk16 (fp32): warp w of the warpgroup owns rows
// 16w..16w+15; register 4j + {0,1} holds row 16w + lane/4, columns
// 8j + 2 (lane % 4) + {0,1}; registers 4j + {2,3} the same columns of row + 8.
// That is mma.sync m16n8's C layout per n8 block, and the A-register layout
// of a k16 step is mma.sync m16n8k16's A layout, so FA2's "C of S is A of P"
// reuse carries over unchanged.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/wgmma_desc.hpp"

namespace h3s::cuda::wgmma {

// The 64 fp32 accumulators of an m64n128 tile as read-write asm operands
// %0..%63 (one per register a thread holds).
#define H3S_WGMMA_ACC64(d)                                                                        \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
      "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),    \
      "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),  \
      "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),  \
      "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),  \
      "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),  \
      "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),  \
      "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),  \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

__device__ __forceinline__ void fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int kPending>
__device__ __forceinline__ void wait() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Generic-proxy shared-memory writes (cp.async, st.shared) made visible to
// the async proxy wgmma reads through; then a barrier.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Keeps the compiler from moving accumulator reads/writes across an async MMA.
__device__ __forceinline__ void fence_operand(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}

// The operand type of the 16-bit forms: bf16 (the exact kernels) or f16
// (the kvi8r kernel's fp16 operand variant).
enum class Operand16 { bf16, f16 };

#define H3S_WGMMA_M64N128K16_SS(TYPE)                                                           \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                  \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                  \
  " "                                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
#define H3S_WGMMA_M64N128K16_RS_TNSPB(TYPE)                                                     \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                  \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                  \
  " "                                                                                           \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"

// d (+)= A B for m64n128k16, A and B in shared memory, both K-major.
// accumulate = false overwrites d (scale-d 0).
template <Operand16 kType = Operand16::bf16>
__device__ __forceinline__ void mma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                  bool accumulate) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kType == Operand16::bf16)
    asm volatile(H3S_WGMMA_M64N128K16_SS("bf16")
                 : H3S_WGMMA_ACC64(d)
                 : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
  else
    asm volatile(H3S_WGMMA_M64N128K16_SS("f16")
                 : H3S_WGMMA_ACC64(d)
                 : "l"(desc_a), "l"(desc_b), "r"(int(accumulate)));
#else
  (void)d, (void)desc_a, (void)desc_b, (void)accumulate;
#endif
}

// d += A B for m64n128k16, A (mma.sync A-fragment layout per warp) in
// registers, B in shared memory MN-major (transposed: N contiguous).
template <Operand16 kType = Operand16::bf16>
__device__ __forceinline__ void mma_m64n128k16_rs_tnspb(float (&d)[64], const uint32_t (&a)[4],
                                                        uint64_t desc_b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (kType == Operand16::bf16)
    asm volatile(H3S_WGMMA_M64N128K16_RS_TNSPB("bf16")
                 : H3S_WGMMA_ACC64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
  else
    asm volatile(H3S_WGMMA_M64N128K16_RS_TNSPB("f16")
                 : H3S_WGMMA_ACC64(d)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
#else
  (void)d, (void)a, (void)desc_b;
#endif
}

#undef H3S_WGMMA_M64N128K16_SS
#undef H3S_WGMMA_M64N128K16_RS_TNSPB

}  // namespace h3s::cuda::wgmma
