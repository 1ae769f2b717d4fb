// e4m3 (bias 7, no infinities, S.1111.111 = NaN) on the device: to fp32 as
// h3s::e4m3_to_f32 (every e4m3 value is an fp32 value, so building the bits
// is exact), and from fp32.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace h3s::cuda {

// fp32 -> e4m3 bits, round to nearest even, saturating to +-448 (NaN stays
// NaN): one cvt on sm_89 and newer, CUDA's software conversion (the same
// rounding) in the sm_80 image, which runs none of its callers (the K/V tiers'
// quantisers: Hopper only) but must compile.
__device__ __forceinline__ uint8_t f32_to_e4m3_satfinite(float x) {
#if __CUDA_ARCH__ >= 890
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(0.0f), "f"(x));
  return uint8_t(r & 0xffu);
#else
  return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
#endif
}

__device__ __forceinline__ float e4m3_to_f32(uint32_t v) {
  const uint32_t exp = (v >> 3) & 0xfu, man = v & 0x7u;
  float mag;
  if (exp == 0xfu && man == 0x7u)
    mag = __int_as_float(0x7fc00000);
  else if (exp == 0u)
    mag = __fmul_rn(__uint2float_rn(man), 0x1p-9f);  // subnormal: man * 2^-9
  else
    mag = __int_as_float(int(((exp + 120u) << 23) | (man << 20)));  // (8 + man) * 2^(exp - 10)
  return (v & 0x80u) != 0u ? -mag : mag;
}

}  // namespace h3s::cuda
