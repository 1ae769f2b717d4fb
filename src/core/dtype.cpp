// Software conversions for the narrow float formats (see dtype.hpp for the rules).
#include "core/dtype.hpp"

#include <bit>
#include <cmath>
#include <limits>

namespace h3s {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::f32:
      return "f32";
    case DType::i8:
      return "i8";
    case DType::i32:
      return "i32";
    case DType::u8:
      return "u8";
    case DType::f8e4m3:
      return "f8e4m3";
    case DType::e2m1x2:
      return "e2m1x2";
  }
  return "?";
}

namespace {

// Round a finite, non-negative magnitude to a float format with `mant` stored
// mantissa bits and minimum normal exponent `emin`, RNE, returning the value as
// fp32 (exact). Subnormals are spaced 2^(emin - mant).
float round_to_format(float a, int mant, int emin) {
  if (a == 0.0f) return 0.0f;
  if (std::isinf(a)) return a;  // frexp leaves the exponent unspecified for inf
  int e;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1)
  int exp = e - 1;    // a in [2^exp, 2^(exp+1))
  if (exp < emin) exp = emin;
  // quantum of the format at this exponent
  const float q = std::ldexp(1.0f, exp - mant);
  // a / q is exact (power-of-two scaling); nearbyint rounds half to even
  // under the default rounding mode.
  return std::nearbyint(a / q) * q;
}

}  // namespace

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ffu;
  float mag;
  if (exp == 0x1f) {
    mag = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (exp == 0) {
    mag = std::ldexp(float(man), -24);
  } else {
    mag = std::ldexp(float(man | 0x400u), exp - 25);
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | sign);
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return uint16_t(sign | 0x7e00u);
  const float r = round_to_format(a, 10, -14);
  if (!(r < 65536.0f) || r > 65504.0f) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (r < std::ldexp(1.0f, -14)) return uint16_t(sign | uint16_t(std::ldexp(r, 24)));
  int e;
  const float m = std::frexp(r, &e);  // r = m * 2^e, m in [0.5,1)
  const uint16_t exp = uint16_t(e - 1 + 15);
  const uint16_t man = uint16_t(std::ldexp(m, 11)) & 0x3ffu;
  return uint16_t(sign | (exp << 10) | man);
}

float e4m3_to_f32(uint8_t v) {
  const bool neg = v & 0x80u;
  const int exp = (v >> 3) & 0xf;
  const int man = v & 0x7;
  if (exp == 0xf && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(float(man | 8), exp - 10);
  return neg ? -mag : mag;
}

uint8_t f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  float r = round_to_format(std::fabs(f), 3, -6);
  if (!(r <= 448.0f)) r = 448.0f;  // saturate finite overflow and inf
  if (r < std::ldexp(1.0f, -6)) return uint8_t(sign | uint8_t(std::ldexp(r, 9)));
  int e;
  const float m = std::frexp(r, &e);
  const uint8_t exp = uint8_t(e - 1 + 7);
  const uint8_t man = uint8_t(std::ldexp(m, 4)) & 0x7u;
  return uint8_t(sign | (exp << 3) | man);
}

float e2m1_to_f32(uint8_t code) {
  static constexpr float kLevels[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float mag = kLevels[code & 0x7];
  return (code & 0x8) ? -mag : mag;
}

uint8_t f32_to_e2m1(float f) {
  const uint8_t sign = std::signbit(f) && !std::isnan(f) ? 0x8 : 0x0;
  float r = std::isnan(f) ? 6.0f : round_to_format(std::fabs(f), 1, 0);
  if (!(r <= 6.0f)) r = 6.0f;
  static constexpr float kLevels[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t c = 0; c < 8; ++c)
    if (kLevels[c] == r) return uint8_t(sign | c);
  return uint8_t(sign | 7);
}

}  // namespace h3s
