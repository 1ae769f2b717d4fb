// Exhaustive and randomized checks of the software float conversions in core/dtype.
//
// Every reference below is written independently of src/core/dtype.cpp: decodes
// use the format definitions directly (double arithmetic), and encodes pick the
// nearest representable value by search, ties to the even code.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/torch_randn.hpp"

namespace h3s {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float f) {
  return std::bit_cast<uint32_t>(f);
}
float from_bits(uint32_t u) {
  return std::bit_cast<float>(u);
}
float next_up(float f) {
  return std::nextafter(f, kInf);
}
float next_down(float f) {
  return std::nextafter(f, -kInf);
}

// ---------------------------------------------------------------------------
// dtype_size / dtype_name
// ---------------------------------------------------------------------------

static_assert(dtype_size(DType::bf16) == 2);
static_assert(dtype_size(DType::f16) == 2);
static_assert(dtype_size(DType::f32) == 4);
static_assert(dtype_size(DType::i8) == 1);
static_assert(dtype_size(DType::i32) == 4);
static_assert(dtype_size(DType::u8) == 1);
static_assert(dtype_size(DType::f8e4m3) == 1);
static_assert(dtype_size(DType::e2m1x2) == 1);

TEST(DTypeInfo, SizeAndNameOfEveryEnumerator) {
  struct Row {
    DType t;
    size_t size;
    const char* name;
  };
  const Row rows[] = {
      {DType::bf16, 2, "bf16"},     {DType::f16, 2, "f16"},       {DType::f32, 4, "f32"},
      {DType::i8, 1, "i8"},         {DType::i32, 4, "i32"},       {DType::u8, 1, "u8"},
      {DType::f8e4m3, 1, "f8e4m3"}, {DType::e2m1x2, 1, "e2m1x2"},
  };
  std::vector<std::string> seen;
  for (const Row& r : rows) {
    EXPECT_EQ(dtype_size(r.t), r.size) << r.name;
    EXPECT_EQ(dtype_name(r.t), r.name);
    seen.emplace_back(dtype_name(r.t));
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end()) << "names must be distinct";
  // Out-of-range values do not crash.
  EXPECT_EQ(dtype_size(static_cast<DType>(200)), 0u);
  EXPECT_EQ(dtype_name(static_cast<DType>(200)), "?");
}

// ---------------------------------------------------------------------------
// bf16
// ---------------------------------------------------------------------------

bool bf16_is_nan(uint16_t b) {
  return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0;
}

TEST(DTypeBf16, DecodeIsUpperHalfOfFp32) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = bf16_to_f32(bf16{uint16_t(b)});
    ASSERT_EQ(bits(f), b << 16) << std::hex << b;
  }
}

TEST(DTypeBf16, ExhaustiveRoundtrip) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = bf16_to_f32(bf16{h});
    const uint16_t back = f32_to_bf16(f).bits;
    if (bf16_is_nan(h)) {
      ASSERT_TRUE(bf16_is_nan(back)) << std::hex << b << " -> " << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << "NaN keeps its sign";
      ASSERT_TRUE(back & 0x40u) << "NaN comes back quiet";
    } else {
      ASSERT_EQ(back, h) << std::hex << b;
    }
  }
}

TEST(DTypeBf16, NanPayloadInLowBitsStaysNan) {
  // fp32 NaNs whose payload lives only in the 16 bits bf16 drops must not
  // become infinities.
  for (uint32_t low : {1u, 0x7fffu, 0x8000u, 0xffffu}) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      const float f = from_bits(sign | 0x7f800000u | low);
      ASSERT_TRUE(std::isnan(f));
      const uint16_t b = f32_to_bf16(f).bits;
      EXPECT_TRUE(bf16_is_nan(b)) << std::hex << low << " -> " << b;
      EXPECT_TRUE(std::isnan(round_bf16(f)));
    }
  }
  EXPECT_TRUE(std::isnan(round_bf16(kNaN)));
}

// For every finite bf16 v below the maximum: the exact fp32 midpoint between v
// and its successor rounds to the even one, one fp32 ulp above rounds up, one
// below rounds down. Done for both signs.
TEST(DTypeBf16, RoundNearestEvenAtEveryMidpoint) {
  for (uint32_t b = 0; b < 0x7f80u; ++b) {
    const uint32_t succ = b + 1;  // 0x7f80 for the maximum, i.e. +inf
    for (uint32_t sign : {0u, 0x8000u}) {
      const uint32_t mid_bits = ((sign | b) << 16) | 0x8000u;
      const float mid = from_bits(mid_bits);
      if (succ < 0x7f80u) {
        // The bit pattern is the true midpoint.
        const double lo = double(bf16_to_f32(bf16{uint16_t(sign | b)}));
        const double hi = double(bf16_to_f32(bf16{uint16_t(sign | succ)}));
        ASSERT_EQ(double(mid), (lo + hi) / 2) << std::hex << b;
      }
      const uint16_t even = uint16_t(sign | ((b & 1u) ? succ : b));
      ASSERT_EQ(f32_to_bf16(mid).bits, even) << std::hex << (sign | b);
      ASSERT_EQ(f32_to_bf16(from_bits(mid_bits + 1)).bits, uint16_t(sign | succ))
          << std::hex << (sign | b);
      ASSERT_EQ(f32_to_bf16(from_bits(mid_bits - 1)).bits, uint16_t(sign | b))
          << std::hex << (sign | b);
    }
  }
}

TEST(DTypeBf16, OverflowRoundsToInfinityPerRne) {
  const float max = bf16_to_f32(bf16{0x7f7f});
  EXPECT_FLOAT_EQ(max, 3.38953139e38f);
  const float half = from_bits(0x7f7f8000u);  // halfway between max and 2^128
  EXPECT_NEAR(double(half), 3.3961e38, 1e34);
  EXPECT_EQ(f32_to_bf16(half).bits, 0x7f80u);
  EXPECT_EQ(f32_to_bf16(-half).bits, 0xff80u);
  EXPECT_EQ(f32_to_bf16(next_down(half)).bits, 0x7f7fu);
  EXPECT_EQ(f32_to_bf16(-next_down(half)).bits, 0xff7fu);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()).bits, 0x7f80u);
  EXPECT_EQ(f32_to_bf16(kInf).bits, 0x7f80u);
  EXPECT_EQ(f32_to_bf16(-kInf).bits, 0xff80u);
  EXPECT_EQ(round_bf16(half), kInf);
  EXPECT_EQ(round_bf16(next_down(half)), max);
}

TEST(DTypeBf16, RoundBf16Values) {
  EXPECT_EQ(round_bf16(1.0f), 1.0f);
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f), 1.0f);                // tie -> even (1.0)
  EXPECT_EQ(round_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);  // tie -> even (up)
  EXPECT_EQ(round_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(round_bf16(-0.0f), -0.0f);
  EXPECT_TRUE(std::signbit(round_bf16(-0.0f)));
  EXPECT_EQ(round_bf16(3.14159265f), 3.140625f);
  EXPECT_EQ(round_bf16(-3.14159265f), -3.140625f);
  // Subnormals round like everything else (no flushing here).
  EXPECT_EQ(round_bf16(from_bits(0x00010000u)), from_bits(0x00010000u));
  EXPECT_EQ(round_bf16(from_bits(0x00008000u)), 0.0f);  // tie -> even (zero)
  EXPECT_EQ(round_bf16(from_bits(0x00018000u)), from_bits(0x00020000u));
  EXPECT_EQ(round_bf16(from_bits(0x00000001u)), 0.0f);
  // Result is always a bf16 value, idempotent, and within half a bf16 ulp.
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000; ++i) {
    const float f = from_bits(uint32_t(rng()));
    if (!std::isfinite(f)) continue;
    const float r = round_bf16(f);
    ASSERT_EQ(bits(r) & 0xffffu, 0u);
    ASSERT_EQ(bits(round_bf16(r)), bits(r));
    if (std::isfinite(r)) {
      const uint32_t rb = bits(r) >> 16;
      const double ulp =
          double(from_bits(((rb & 0x7fffu) + 1) << 16)) - double(from_bits((rb & 0x7fffu) << 16));
      ASSERT_LE(std::fabs(double(r) - double(f)), ulp / 2 * (1 + 1e-12)) << f;
    }
  }
}

TEST(DTypeBf16, FlushSubnormal) {
  // Every bf16-representable value, as fp32.
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const float f = bf16_to_f32(bf16{uint16_t(b)});
    const float g = flush_subnormal(f);
    const bool sub = (b & 0x7f80u) == 0;
    if (sub) {
      ASSERT_EQ(bits(g), (b & 0x8000u) << 16) << std::hex << b;  // signed zero
    } else if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(g));
    } else {
      ASSERT_EQ(bits(g), bits(f)) << std::hex << b;
    }
  }
  // fp32 subnormals whose low bits are set (not bf16-representable).
  EXPECT_EQ(bits(flush_subnormal(from_bits(0x00000001u))), 0u);
  EXPECT_EQ(bits(flush_subnormal(from_bits(0x807fffffu))), 0x80000000u);
  EXPECT_EQ(flush_subnormal(std::numeric_limits<float>::min()), std::numeric_limits<float>::min());
  EXPECT_EQ(flush_subnormal(-std::numeric_limits<float>::min()),
            -std::numeric_limits<float>::min());
  EXPECT_EQ(flush_subnormal(kInf), kInf);
  EXPECT_EQ(flush_subnormal(-kInf), -kInf);
  EXPECT_EQ(flush_subnormal(1.5f), 1.5f);
  std::mt19937 rng(99);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t u = uint32_t(rng());
    const float g = flush_subnormal(from_bits(u));
    if ((u & 0x7f800000u) == 0)
      ASSERT_EQ(bits(g), u & 0x80000000u);
    else
      ASSERT_EQ(bits(g), u);
  }
}

// ---------------------------------------------------------------------------
// f16 (IEEE binary16)
// ---------------------------------------------------------------------------

bool f16_is_nan(uint16_t h) {
  return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
}

// Decoding straight from the definition.
double ref_f16_decode(uint16_t h) {
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  double v;
  if (e == 0x1f)
    v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0)
    v = std::ldexp(double(m), -24);
  else
    v = std::ldexp(double(1024 + m), e - 25);
  return (h & 0x8000u) ? -v : v;
}

// Nearest binary16 by binary search over the (monotonic) positive codes,
// ties to the even code; |x| >= 65520 (halfway to 2^16) -> inf.
uint16_t ref_f32_to_f16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(double(f));
  if (std::isnan(f)) return uint16_t(sign | 0x7e00u);
  if (a >= 65520.0) return uint16_t(sign | 0x7c00u);
  // Largest code c in [0, 0x7bff] with value <= a.
  uint32_t lo = 0, hi = 0x7bff;
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (ref_f16_decode(uint16_t(mid)) <= a)
      lo = mid;
    else
      hi = mid - 1;
  }
  uint32_t c = lo;
  if (c < 0x7bff) {
    const double below = a - ref_f16_decode(uint16_t(c));
    const double above = ref_f16_decode(uint16_t(c + 1)) - a;
    if (above < below || (above == below && (c & 1u))) ++c;
  } else if (a > 65504.0) {
    c = 0x7bff;  // between max and the overflow threshold
  }
  return uint16_t(sign | c);
}

#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
#define H3S_HAVE_FLOAT16 1
uint16_t hw_f32_to_f16(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}
#endif

TEST(DTypeF16, DecodeMatchesDefinition) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t h = uint16_t(b);
    const float f = f16_to_f32(h);
    const double r = ref_f16_decode(h);
    if (f16_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
    } else {
      ASSERT_EQ(double(f), r) << std::hex << b;
      ASSERT_EQ(std::signbit(f), bool(h & 0x8000u)) << std::hex << b;
    }
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x0400), 0x1p-14f);
  EXPECT_EQ(f16_to_f32(0x7c00), kInf);
  EXPECT_EQ(f16_to_f32(0xfc00), -kInf);
  EXPECT_EQ(bits(f16_to_f32(0x8000)), 0x80000000u);
}

TEST(DTypeF16, ExhaustiveRoundtrip) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const uint16_t h = uint16_t(b);
    const uint16_t back = f32_to_f16(f16_to_f32(h));
    if (f16_is_nan(h))
      ASSERT_TRUE(f16_is_nan(back)) << std::hex << b << " -> " << back;
    else
      ASSERT_EQ(back, h) << std::hex << b;
  }
}

TEST(DTypeF16, SpecialValues) {
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bffu);
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bffu);
  EXPECT_EQ(f32_to_f16(next_down(65520.0f)), 0x7bffu);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00u);  // tie with 2^16 -> even -> inf
  EXPECT_EQ(f32_to_f16(-65520.0f), 0xfc00u);
  EXPECT_EQ(f32_to_f16(-65519.0f), 0xfbffu);
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00u);
  EXPECT_EQ(f32_to_f16(kInf), 0x7c00u);
  EXPECT_EQ(f32_to_f16(-kInf), 0xfc00u);
  EXPECT_TRUE(f16_is_nan(f32_to_f16(kNaN)));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(-kNaN)));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(from_bits(0x7f800001u))));  // signalling-ish payload
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000u);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000u);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00u);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000u);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1p-11f), 0x3c00u);      // tie -> even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02u);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(next_up(1.0f + 0x1p-11f)), 0x3c01u);
  // Gradual underflow.
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001u);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000u);  // tie with zero -> even (zero)
  EXPECT_EQ(f32_to_f16(-0x1p-25f), 0x8000u);
  EXPECT_EQ(f32_to_f16(next_up(0x1p-25f)), 0x0001u);
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002u);         // 1.5 quanta -> 2
  EXPECT_EQ(f32_to_f16(5 * 0x1p-25f), 0x0002u);         // 2.5 quanta -> 2
  EXPECT_EQ(f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400u);  // top subnormal tie -> min normal
  EXPECT_EQ(f32_to_f16(next_down(0x1p-14f - 0x1p-25f)), 0x03ffu);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::min()), 0x0000u);
}

std::vector<float> f16_test_inputs() {
  std::mt19937 rng(20240611);
  std::vector<float> v;
  // 1. Uniform fp32 bit patterns (mostly huge/tiny magnitudes).
  for (int i = 0; i < 100000; ++i) v.push_back(from_bits(uint32_t(rng())));
  // 2. Exponents spanning f16 subnormals through overflow.
  std::uniform_int_distribution<int> exp_d(-27, 17);
  for (int i = 0; i < 400000; ++i) {
    const uint32_t e = uint32_t(exp_d(rng) + 127);
    v.push_back(from_bits((uint32_t(rng()) & 0x807fffffu) | (e << 23)));
  }
  // 3. Exact ties between neighbouring f16 values and their fp32 neighbours.
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    const float mid = float((ref_f16_decode(uint16_t(h)) + ref_f16_decode(uint16_t(h + 1))) / 2);
    for (float x : {mid, next_up(mid), next_down(mid)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  // 4. Around the overflow threshold.
  for (float x = 65000.0f; x < 66000.0f; x += 0.25f) v.push_back(x);
  return v;
}

TEST(DTypeF16, MatchesIndependentReference) {
  int checked = 0;
  for (float f : f16_test_inputs()) {
    const uint16_t got = f32_to_f16(f);
    const uint16_t want = ref_f32_to_f16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(f16_is_nan(got)) << f;
      continue;
    }
    ASSERT_EQ(got, want) << std::hexfloat << f << std::hex << " got " << got << " want " << want;
    ++checked;
  }
  EXPECT_GT(checked, 500000);
}

#ifdef H3S_HAVE_FLOAT16
TEST(DTypeF16, MatchesCompilerFloat16) {
  // The reference above is itself checked against the compiler's _Float16
  // conversion (RNE through libgcc or F16C).
  for (float f : f16_test_inputs()) {
    if (std::isnan(f)) continue;
    const uint16_t hw = hw_f32_to_f16(f);
    ASSERT_EQ(ref_f32_to_f16(f), hw) << std::hexfloat << f;
    ASSERT_EQ(f32_to_f16(f), hw) << std::hexfloat << f;
  }
}
#endif

// ---------------------------------------------------------------------------
// fp8 e4m3fn
// ---------------------------------------------------------------------------

bool e4m3_is_nan(uint8_t v) {
  return (v & 0x7fu) == 0x7fu;
}

double ref_e4m3_decode(uint8_t v) {
  if (e4m3_is_nan(v)) return std::numeric_limits<double>::quiet_NaN();
  const int e = (v >> 3) & 0xf;
  const int m = v & 0x7;
  const double mag =
      e == 0 ? (m / 8.0) * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
  return (v & 0x80u) ? -mag : mag;
}

// Nearest e4m3 code by linear search over 0..0x7e, ties to even; saturating.
uint8_t ref_f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const double a = std::fabs(double(f));
  uint8_t best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (uint8_t c = 0; c <= 0x7e; ++c) {
    const double d = std::fabs(ref_e4m3_decode(c) - a);
    if (d < best_d || (d == best_d && (c & 1u) == 0)) {
      best = c;
      best_d = d;
    }
  }
  return uint8_t(sign | best);
}

TEST(DTypeE4m3, ExhaustiveDecode) {
  for (uint32_t c = 0; c < 256; ++c) {
    const uint8_t v = uint8_t(c);
    const float f = e4m3_to_f32(v);
    if (c == 0x7f || c == 0xff) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(double(f), ref_e4m3_decode(v)) << c;
    EXPECT_EQ(std::signbit(f), c >= 0x80) << c;
    EXPECT_TRUE(std::isfinite(f)) << c;  // no infinities in e4m3fn
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);  // 0x78 is a number, not inf
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * 0x1p-9f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(bits(e4m3_to_f32(0x80)), 0x80000000u);
}

TEST(DTypeE4m3, EncodeRoundtripAllNumbers) {
  int n = 0;
  for (uint32_t c = 0; c < 256; ++c) {
    if (c == 0x7f || c == 0xff) continue;
    ASSERT_EQ(f32_to_e4m3(e4m3_to_f32(uint8_t(c))), c) << c;
    ++n;
  }
  EXPECT_EQ(n, 254);
}

TEST(DTypeE4m3, TiesBetweenNeighboursRoundToEven) {
  for (uint32_t c = 0; c < 0x7e; ++c) {
    for (uint32_t sign : {0u, 0x80u}) {
      const uint8_t lo = uint8_t(sign | c), hi = uint8_t(sign | (c + 1));
      const double mid_d = (ref_e4m3_decode(lo) + ref_e4m3_decode(hi)) / 2;
      const float mid = float(mid_d);
      ASSERT_EQ(double(mid), mid_d);  // exact in fp32
      const uint8_t even = (c & 1u) ? hi : lo;
      ASSERT_EQ(f32_to_e4m3(mid), even) << c;
      const float away = sign ? -kInf : kInf;
      ASSERT_EQ(f32_to_e4m3(std::nextafter(mid, away)), hi) << c;
      ASSERT_EQ(f32_to_e4m3(std::nextafter(mid, 0.0f)), lo) << c;
    }
  }
}

TEST(DTypeE4m3, Saturation) {
  EXPECT_EQ(f32_to_e4m3(448.0f), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(449.0f), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(next_up(464.0f)), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(480.0f), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(1e9f), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::max()), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(kInf), 0x7eu);
  EXPECT_EQ(f32_to_e4m3(-464.0f), 0xfeu);
  EXPECT_EQ(f32_to_e4m3(-1e9f), 0xfeu);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::max()), 0xfeu);
  EXPECT_EQ(f32_to_e4m3(-kInf), 0xfeu);
  EXPECT_EQ(f32_to_e4m3(kNaN), 0x7fu);
  EXPECT_EQ(f32_to_e4m3(-kNaN), 0x7fu);
  EXPECT_EQ(f32_to_e4m3(from_bits(0xffc00001u)), 0x7fu);
}

TEST(DTypeE4m3, Subnormals) {
  EXPECT_EQ(f32_to_e4m3(0x1p-9f), 0x01u);
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00u);  // tie with zero -> even (zero)
  EXPECT_EQ(f32_to_e4m3(-0x1p-10f), 0x80u);
  EXPECT_EQ(f32_to_e4m3(next_up(0x1p-10f)), 0x01u);
  EXPECT_EQ(f32_to_e4m3(-next_up(0x1p-10f)), 0x81u);
  EXPECT_EQ(f32_to_e4m3(3 * 0x1p-10f), 0x02u);   // 1.5 quanta -> 2
  EXPECT_EQ(f32_to_e4m3(15 * 0x1p-10f), 0x08u);  // 7.5 quanta -> min normal
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00u);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80u);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00u);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00u);
}

TEST(DTypeE4m3, MatchesIndependentReference) {
  std::mt19937 rng(77);
  std::uniform_int_distribution<int> exp_d(-13, 10);
  for (int i = 0; i < 200000; ++i) {
    float f;
    if (i % 4 == 0) {
      f = from_bits(uint32_t(rng()));
      if (std::isnan(f)) continue;
    } else {
      const uint32_t e = uint32_t(exp_d(rng) + 127);
      f = from_bits((uint32_t(rng()) & 0x807fffffu) | (e << 23));
    }
    ASSERT_EQ(f32_to_e4m3(f), ref_f32_to_e4m3(f)) << std::hexfloat << f;
  }
}

// ---------------------------------------------------------------------------
// e2m1 (fp4)
// ---------------------------------------------------------------------------

TEST(DTypeE2m1, DecodeAllCodes) {
  const float levels[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (uint8_t c = 0; c < 16; ++c) {
    const float want = (c & 8) ? -levels[c & 7] : levels[c & 7];
    EXPECT_EQ(e2m1_to_f32(c), want) << int(c);
    EXPECT_EQ(std::signbit(e2m1_to_f32(c)), c >= 8) << int(c);
    // Only the low nibble is the code.
    EXPECT_EQ(bits(e2m1_to_f32(uint8_t(c | 0xf0u))), bits(e2m1_to_f32(c))) << int(c);
    EXPECT_EQ(bits(e2m1_to_f32(uint8_t(c | 0x30u))), bits(e2m1_to_f32(c))) << int(c);
  }
}

TEST(DTypeE2m1, EncodeEveryLevel) {
  for (uint8_t c = 0; c < 16; ++c) EXPECT_EQ(f32_to_e2m1(e2m1_to_f32(c)), c) << int(c);
}

TEST(DTypeE2m1, TiesAndSaturation) {
  struct Case {
    float x;
    float want;
  };
  const Case cases[] = {
      {0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f},  {1.75f, 2.0f}, {2.5f, 2.0f}, {3.5f, 4.0f},
      {5.0f, 4.0f},  {7.0f, 6.0f},  {100.0f, 6.0f}, {1e30f, 6.0f}, {kInf, 6.0f}, {0.2f, 0.0f},
      {0.3f, 0.5f},  {2.6f, 3.0f},  {4.9f, 4.0f},   {5.1f, 6.0f},  {6.5f, 6.0f},
  };
  for (const Case& k : cases) {
    const uint8_t code = f32_to_e2m1(k.x);
    EXPECT_EQ(code & 0xf0u, 0u) << k.x;
    EXPECT_EQ(e2m1_to_f32(code), k.want) << k.x;
    EXPECT_FALSE(std::signbit(e2m1_to_f32(code))) << k.x;
    const uint8_t neg = f32_to_e2m1(-k.x);
    EXPECT_EQ(neg, uint8_t(code | 0x8u)) << -k.x;
    EXPECT_EQ(e2m1_to_f32(neg), -k.want) << -k.x;
  }
  // Ties at the exact midpoints go to the even code; one ulp off goes to the
  // nearer level.
  EXPECT_EQ(f32_to_e2m1(next_up(0.25f)), 0x1u);
  EXPECT_EQ(f32_to_e2m1(next_down(0.75f)), 0x1u);
  EXPECT_EQ(f32_to_e2m1(next_up(1.25f)), 0x3u);
  EXPECT_EQ(f32_to_e2m1(next_down(5.0f)), 0x6u);
  EXPECT_EQ(f32_to_e2m1(next_up(5.0f)), 0x7u);
  EXPECT_EQ(f32_to_e2m1(0.0f), 0x0u);
  EXPECT_EQ(f32_to_e2m1(-0.0f), 0x8u);
  EXPECT_EQ(f32_to_e2m1(1e-30f), 0x0u);
  // No NaN in e2m1: documented as +6.
  EXPECT_EQ(f32_to_e2m1(kNaN), 0x7u);
  EXPECT_EQ(f32_to_e2m1(-kNaN), 0x7u);
}

TEST(DTypeE2m1, NearestLevelOnDenseSweep) {
  const float levels[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int i = 0; i <= 8000; ++i) {
    const float x = float(i) / 1000.0f;  // 0 .. 8
    int best = 0;
    for (int c = 1; c < 8; ++c) {
      const double d = std::fabs(double(levels[c]) - double(x));
      const double bd = std::fabs(double(levels[best]) - double(x));
      if (d < bd || (d == bd && (c & 1) == 0)) best = c;
    }
    ASSERT_EQ(f32_to_e2m1(x), uint8_t(best)) << x;
    ASSERT_EQ(f32_to_e2m1(-x), uint8_t(best | 8)) << -x;
  }
}

}  // namespace
}  // namespace h3s

// torch's CPU generator stream (core/torch_randn): 24-bit uniforms, Box-Muller
// in blocks of 16, the last 16 redrawn for a ragged length. (Agreement with
// torch itself is measured by tests/python/test_forward.py.)
namespace h3s {
namespace {

TEST(TorchRandn, UniformsAre24BitAndSeeded) {
  const std::vector<float> a = torch_cpu_rand(42, 1000), b = torch_cpu_rand(42, 1000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, torch_cpu_rand(43, 1000));
  for (float u : a) {
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_EQ(u * 16777216.0f, std::floor(u * 16777216.0f)) << u;  // k / 2^24
  }
  // The standard MT19937 stream: a uniform is the low 24 bits of a draw over 2^24.
  std::mt19937 g(0);
  EXPECT_EQ(torch_cpu_rand(0, 1)[0], float(g() & 0xffffffu) / 16777216.0f);
}

TEST(TorchRandn, NormalsPairUniformsAndRedrawTheTail) {
  const std::vector<float> n32 = torch_cpu_randn(7, 32), n17 = torch_cpu_randn(7, 17);
  EXPECT_EQ(torch_cpu_randn(7, 32), n32);
  double sum = 0, sq = 0;
  const std::vector<float> big = torch_cpu_randn(7, 1 << 16);
  for (float v : big) {
    sum += v;
    sq += double(v) * v;
  }
  EXPECT_NEAR(sum / double(big.size()), 0.0, 0.02);
  EXPECT_NEAR(sq / double(big.size()), 1.0, 0.02);
  // A prefix of 16 is the same transform of the same uniforms...
  EXPECT_TRUE(std::equal(n17.begin(), n17.begin() + 1, n32.begin()));
  // ...but the ragged tail [1, 17) is redrawn from the next 16 uniforms.
  EXPECT_NE(n17[16], n32[16]);
  // Box-Muller by hand on the first pair.
  const std::vector<float> u = torch_cpu_rand(7, 16);
  const double r = std::sqrt(-2.0 * std::log(double(1.0f - u[0])));
  const double th = double(float(2.0 * 3.14159265358979323846) * u[8]);
  EXPECT_EQ(n32[0], float(r * std::cos(th)));
  EXPECT_EQ(n32[8], float(r * std::sin(th)));
  EXPECT_THROW(torch_cpu_randn(7, 15), Error);
}

}  // namespace
}  // namespace h3s
