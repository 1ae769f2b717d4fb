// The FMA-pipe 2^x of the kvi8s softmax variants (attn_exp2_poly.hpp; they
// lost, and no kernel calls it today), on the CPU: its relative error over
// every argument the softmax gives it, its clamp, and how often it moves an
// e4m3 probability (P = e4m3(2^x), the kvi8s P V operand) off the exactly
// rounded value. The GPU suite checks the device's bits equal these
// (GpuArch.Exp2PolyGivesTheHostsBits).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "backend/cuda/attention/attn_exp2_poly.hpp"
#include "core/dtype.hpp"

namespace h3s::cuda::attn {
namespace {

double rel_error(float x) {
  const double want = std::exp2(double(x));
  return std::fabs(double(exp2_poly(x)) - want) / want;
}

TEST(Exp2Poly, RelativeErrorIsWithinItsBoundOverTheSoftmaxsRange) {
  // The softmax's arguments: x <= 8 (P is 2^8 p), down to the clamp. Every
  // fp32 in [1, 2) (all of one binade's mantissas), a fine grid over the
  // range and each segment's ends, where the reduction switches n.
  double worst = 0.0;
  for (uint32_t m = 0; m < (1u << 23); ++m) {
    const float x = std::bit_cast<float>(0x3F800000u | m);
    worst = std::max(worst, rel_error(x));
  }
  for (int i = 0; i <= 133 * 4096; ++i) {
    const float x = kExp2PolyMin + float(i) / 4096.0f;
    worst = std::max(worst, rel_error(x));
    worst = std::max(worst, rel_error(std::nextafter(x, 9.0f)));
  }
  std::mt19937 rng(20261205);
  std::uniform_real_distribution<float> arg(kExp2PolyMin, 8.0f);
  for (int i = 0; i < 1000000; ++i) worst = std::max(worst, rel_error(arg(rng)));
  std::printf("[ exp2_poly ] worst relative error %.3g (bound %.3g)\n", worst,
              kExp2PolyMaxRelError);
  EXPECT_LE(worst, kExp2PolyMaxRelError);
  EXPECT_GT(worst, 1e-6) << "the bound is the polynomial's, not fp32 rounding's";
}

TEST(Exp2Poly, ArgumentsBelowTheClampGiveATinyNormalNumber) {
  const float floor = exp2_poly(kExp2PolyMin);
  EXPECT_GT(floor, 0.0f);
  EXPECT_TRUE(std::isnormal(floor));
  EXPECT_LT(floor, std::ldexp(1.0f, -124));
  for (const float x : {-125.5f, -126.0f, -200.0f, -1e30f, -INFINITY})
    EXPECT_EQ(exp2_poly(x), floor) << x;
}

TEST(Exp2Poly, RarelyMovesAnE4m3Probability) {
  // P = e4m3(2^x) for x over e4m3's range: the polynomial's and the exactly
  // rounded value's codes differ only where 2^x lies within the error of a
  // rounding boundary, and then by one step.
  int moved = 0, total = 0;
  for (int i = 0; i <= 18 * 65536; ++i) {
    const float x = -10.0f + float(i) / 65536.0f;  // 2^-10 (e4m3 rounds it to 0) to 2^8
    const uint8_t poly = f32_to_e4m3(exp2_poly(x));
    const uint8_t exact = f32_to_e4m3(float(std::exp2(double(x))));
    ++total;
    if (poly != exact) {
      ++moved;
      EXPECT_EQ(std::abs(int(poly) - int(exact)), 1) << x;
    }
  }
  const double share = double(moved) / total;
  std::printf("[ exp2_poly ] e4m3 P moved by one step for %.3g of arguments\n", share);
  EXPECT_LT(share, 1e-3);
}

}  // namespace
}  // namespace h3s::cuda::attn
