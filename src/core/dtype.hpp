// Element types of the engine and their exact software conversions.
// Every narrowing conversion rounds to nearest, ties to even (RNE); formats
// without infinities (fp8 e4m3fn, e2m1) saturate to their largest finite value.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "h3s/dtype.hpp"  // DType, dtype_size, dtype_name, Device

namespace h3s {

// bf16 is stored as its raw 16 bits.
struct bf16 {
  uint16_t bits = 0;
};

inline float bf16_to_f32(bf16 v) {
  return std::bit_cast<float>(uint32_t(v.bits) << 16);
}

// RNE; NaN stays NaN (quiet), overflow rounds to +-inf as IEEE says.
inline bf16 f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

// Round an fp32 value to the nearest bf16 and back: the "bf16(...)" of docs/H3_MODEL.md.
inline float round_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

// Flush a bf16/f32 subnormal to signed zero (what --use_fast_math kernels do to inputs).
inline float flush_subnormal(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  return (u & 0x7f800000u) == 0 ? std::bit_cast<float>(u & 0x80000000u) : f;
}

// IEEE binary16: RNE, overflow to inf, gradual underflow.
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// fp8 e4m3fn (OCP): bias 7, no infinities, 0x7f/0xff are NaN, max 448.
// The conversion saturates finite overflow (and +-inf) to +-448 like CUDA's
// __NV_SATFINITE; NaN maps to 0x7f.
float e4m3_to_f32(uint8_t v);
uint8_t f32_to_e4m3(float f);

// e2m1 (fp4): values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and negatives, code in the low
// nibble. Saturates to +-6; NaN maps to +6 as there is no NaN (documented choice).
float e2m1_to_f32(uint8_t code);
uint8_t f32_to_e2m1(float f);

}  // namespace h3s
