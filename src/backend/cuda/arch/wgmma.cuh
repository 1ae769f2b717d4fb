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

// The 64 accumulators of an m64n128 tile as read-write asm operands %0..%63
// (one per register a thread holds), constraint C: "+f" fp32, "+r" int32.
#define H3S_WGMMA_ACC64_AS(C, d)                                                                \
  C(d[0]), C(d[1]), C(d[2]), C(d[3]), C(d[4]), C(d[5]), C(d[6]), C(d[7]), C(d[8]), C(d[9]),     \
      C(d[10]), C(d[11]), C(d[12]), C(d[13]), C(d[14]), C(d[15]), C(d[16]), C(d[17]), C(d[18]), \
      C(d[19]), C(d[20]), C(d[21]), C(d[22]), C(d[23]), C(d[24]), C(d[25]), C(d[26]), C(d[27]), \
      C(d[28]), C(d[29]), C(d[30]), C(d[31]), C(d[32]), C(d[33]), C(d[34]), C(d[35]), C(d[36]), \
      C(d[37]), C(d[38]), C(d[39]), C(d[40]), C(d[41]), C(d[42]), C(d[43]), C(d[44]), C(d[45]), \
      C(d[46]), C(d[47]), C(d[48]), C(d[49]), C(d[50]), C(d[51]), C(d[52]), C(d[53]), C(d[54]), \
      C(d[55]), C(d[56]), C(d[57]), C(d[58]), C(d[59]), C(d[60]), C(d[61]), C(d[62]), C(d[63])
#define H3S_WGMMA_ACC64(d) H3S_WGMMA_ACC64_AS("+f", d)
// Their names in the instruction text.
#define H3S_WGMMA_D64                                                                \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

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

#define H3S_WGMMA_M64N128K16_SS(TYPE)                          \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                 \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE \
  " "                                                          \
  "{" H3S_WGMMA_D64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
#define H3S_WGMMA_M64N128K16_RS_TNSPB(TYPE)                    \
  "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                 \
  "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE \
  " "                                                          \
  "{" H3S_WGMMA_D64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"

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
