// e4m3 (bias 7, no infinities, S.1111.111 = NaN) to fp32 on the device, as
// h3s::e4m3_to_f32: every e4m3 value is an fp32 value, so building the bits
// is exact.
#pragma once

#include <cstdint>

namespace h3s::cuda {

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
