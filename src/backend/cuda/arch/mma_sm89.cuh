// The fp8 tensor-core MMA of mma.sync (sm_89 and newer: Ada, Hopper,
// Blackwell): e4m3 x e4m3 -> fp32, the 8-bit k32 shape whose fragments are
// the int8 MMA's (mma_sm80.cuh). Callers compile it only where __CUDA_ARCH__
// >= 890 and launch it only on such a device (attn_dispatch.cpp).
#pragma once

#include <cstdint>

namespace h3s::cuda::arch {

// d += a * b for a 16x32 e4m3 A fragment (row-major) and a 32x8 e4m3 B
// fragment (column-major), fp32 accumulate.
__device__ __forceinline__ void mma_e4m3_m16n8k32(float (&d)[4], const uint32_t (&a)[4],
                                                  const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  (void)d, (void)a, (void)b;
  __trap();  // no fp8 mma.sync before sm_89
#endif
}

}  // namespace h3s::cuda::arch
