// The arithmetic of kvfp4s' decode (kvfmt/kvfp4s.hpp "decode"), shared by the
// Hopper attention's producer (attention/attn_fp4s_sm90_load.cuh) and the
// decode kernel any sm_80+ GPU runs (kv/kvfp4s_decode.cu), so both write the
// same bf16 K~ and V~. Every value is a bf16x2 pair in a 32-bit word, the
// lower-indexed element in the low half.
//
// Eight e2m1 codes (a 32-bit word, byte j: element 2j in the high nibble)
// decode without a conversion instruction: the magnitude's bf16 high and low
// bytes come from two 8-entry byte tables (prmt), two more prmt interleave
// them into bf16 pairs, and a prmt in sign-replicate mode spreads each
// code's sign bit into a byte mask.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace h3s::cuda::fp4s {

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel) {
  uint32_t r;  // the generic mode: a selector nibble's bit 3 replicates the byte's sign
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(sel));
  return r;
}

// One rounding from the exact a * b + c (fma.rn.bf16x2 is sm_80).
__device__ __forceinline__ uint32_t fma_bf16x2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}

// One rounding from the exact a * b. mul.rn.bf16x2 is sm_90; elsewhere the
// fma with -0 gives the same bits (x + -0 = x under RN, +0 included).
__device__ __forceinline__ uint32_t mul_bf16x2(uint32_t a, uint32_t b) {
  uint32_t r;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
#else
  constexpr uint32_t kMinusZeros = 0x80008000u;
  r = fma_bf16x2(a, b, kMinusZeros);
#endif
  return r;
}

// Eight e2m1 codes -> four bf16x2 of their values, pair j = elements (2j,
// 2j + 1) with 2j in the low half.
__device__ __forceinline__ void decode_e2m1x8(uint32_t w, uint32_t (&o)[4]) {
  // bf16 of 0, 0.5, 1, 1.5 | 2, 3, 4, 6: high bytes, low bytes.
  constexpr uint32_t kHi0 = 0x3F3F3F00u, kHi1 = 0x40404040u;
  constexpr uint32_t kLo0 = 0xC0800000u, kLo1 = 0xC0804000u;
  const uint32_t mag = w & 0x77777777u, w4 = w << 4;  // w4: byte j's msb = element 2j + 1's sign
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // Selector nibbles (element order within byte pairs 2 half, 2 half + 1):
    // e1, e0, e3, e2 -> table bytes H, L in that order.
    const uint32_t sel = half == 0 ? mag : mag >> 16;
    const uint32_t hi = prmt(kHi0, kHi1, sel), lo = prmt(kLo0, kLo1, sel);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const uint32_t j = uint32_t(2 * half + k);
      // (L e_even, H e_even, L e_odd, H e_odd): bytes 1, 5, 0, 4 or 3, 7, 2, 6.
      const uint32_t value = prmt(lo, hi, k == 0 ? 0x4051u : 0x6273u);
      // Bytes 1 and 3: the sign of w's byte j (even element), of w4's (odd).
      const uint32_t sign = prmt(w, w4, ((0xCu + j) << 12) | ((0x8u + j) << 4));
      o[j] = value | (sign & 0x80008000u);
    }
  }
}

// e4m3 bits -> bf16 bits (exact: e4m3 is a subset of bf16).
__device__ __forceinline__ uint32_t e4m3_to_bf16(uint32_t c) {
  const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c & 0xffu), __NV_E4M3);
  return __float_as_uint(__half2float(__half(h))) >> 16;
}
// Eight e4m3 (two words) -> eight bf16 (four words, in order).
__device__ __forceinline__ uint4 e4m3x8_to_bf16(uint2 s) {
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t w = i < 2 ? s.x : s.y, b = 16 * uint32_t(i % 2);
    o[i] = e4m3_to_bf16(w >> b) | e4m3_to_bf16(w >> (b + 8)) << 16;
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// A block global (fp32 holding a bf16 value, kvfp4s::global_of) as a bf16x2
// pair of itself: its high half, exactly.
__device__ __forceinline__ uint32_t global_bf16x2(float g) {
  const uint32_t b = __float_as_uint(g) >> 16;
  return b | b << 16;
}

}  // namespace h3s::cuda::fp4s
