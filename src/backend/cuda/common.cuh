// Helpers shared by the CUDA kernel families: launch checks (host) and, for
// device code, bf16 bits <-> fp32 with the CPU reference's exact rounding,
// subnormal flushing and the reference's SiLU.
//
// Only CUDA and standard headers here: nvcc cannot compile fmt (core/error.hpp)
// in C++20 mode, so launchers report errors through fail_cuda() and
// fail_internal(), defined in cuda_memory.cpp (host compiler) where h3s::Error
// is available.
#pragma once

#include <cuda_runtime.h>
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#endif

#include <cstdint>

namespace h3s::cuda {

// Throws h3s::Error(internal) "<what>: <CUDA error string>" (cuda_memory.cpp).
[[noreturn]] void fail_cuda(const char* what, cudaError_t err);
// Throws h3s::Error(internal) with `what`: a launcher was called with
// arguments CudaBackend should have rejected (a bug, not a user error).
[[noreturn]] void fail_internal(const char* what);

// After a launch: a bad configuration shows here, at the launch that made it.
inline void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail_cuda(kernel, e);
}

// True when p is aligned to `bytes` (a power of two).
inline bool aligned_to(const void* p, uintptr_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

// Device code below; the host half above is also read by cuda_memory.cpp,
// which defines the two fail functions.
#if defined(__CUDACC__)

// bf16 raw bits -> fp32, exact.
__device__ __forceinline__ float bf16_to_f32(uint16_t b) {
  return __uint_as_float(uint32_t(b) << 16);
}

// fp32 -> bf16 bits, round to nearest even: h3s::f32_to_bf16 (core/dtype.hpp)
// spelled in integers. For every non-NaN input this is __float2bfloat16_rn;
// a NaN keeps its sign and high payload and is made quiet (| 0x40), as on the
// CPU, where cvt.rn.bf16.f32 would return the canonical 0x7fff.
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// RNE to bf16 bits in one cvt.rn.bf16.f32, for arithmetic results: equal to
// f32_to_bf16 except that a NaN becomes the canonical 0x7fff. A NaN produced
// by arithmetic has no reproducible payload on either side (x86 and the GPU
// make different default NaNs), so only pass-through conversions need the
// integer form above.
__device__ __forceinline__ uint16_t f32_to_bf16_arith(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

// round_bf16 of the reference: fp32 -> nearest bf16 -> fp32, for values that
// feed further arithmetic. One cvt.rn.bf16.f32: the same value as
// f32_to_bf16 for every non-NaN input, and a NaN stays a NaN (its payload is
// lost to the next operation on either side anyway).
__device__ __forceinline__ float round_bf16(float f) {
  return __bfloat162float(__float2bfloat16_rn(f));
}

// h3s::flush_subnormal: a subnormal becomes zero of the same sign.
__device__ __forceinline__ float flush_subnormal(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x7f800000u) == 0 ? __uint_as_float(u & 0x80000000u) : f;
}

// SiLU of the reference (cpu::silu_f32): g / (1 + exp(-g)) with IEEE division
// and CUDA's accurate expf (not __expf). CUDA's expf has a maximum error of
// 2 ulp while glibc's is within ~0.5 ulp, so they disagree in the last bits
// for some g: on an H200, 13% of fp32 SiLU results differed from the CPU by
// 1-4 ulp, and none once rounded to bf16 (tests/gpu/test_ops_gpu.cpp).
__device__ __forceinline__ float silu_f32(float g) {
  return __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
}

#endif  // __CUDACC__

}  // namespace h3s::cuda
