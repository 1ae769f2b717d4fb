// 2^x as a polynomial on the FMA pipe: FlashAttention-4's split of the
// softmax's exponentials between the SFU (ex2.approx, attn_state.cuh) and the
// FMA units, so a tile's exponentials do not all queue on the SFU. x is
// rounded to an integer n by the 1.5 * 2^23 magic add, 2^f on f = x - n in
// [-1/2, 1/2] is a degree-3 minimax polynomial (Remez on the relative error:
// <= 7.5e-5, against ex2.approx's ~2^-22), and n goes into the exponent field
// with one integer add. Every step is one IEEE-rounded operation, so the host
// and the device give the same bits (tests/ops/test_exp2_poly.cpp,
// tests/gpu/test_arch_gpu.cpp).
//
// The kvi8s softmax rounds P to e4m3 (half a step is 2^-4 relative): the
// polynomial's error moves a probability to the next e4m3 value only within
// 7.5e-5 of a rounding boundary. x below kExp2PolyMin gives
// ~2^kExp2PolyMin, not 0: a normal number, below every row sum's ulp
// (the sum holds 2^8 at least) and e4m3's smallest step.
//
// No kernel calls it: the kvi8s variants that took part of their
// exponentials here lost (io-pr-ts-p8: 749.7 TOPS against io-pr-ts's
// 779.0, docs/PERFORMANCE.md "kvi8s"), and their dial left the mainloop on
// 2026-12-07 (bench/results/experiments/removed_kvi8s_variants.diff applies
// on the tree that still has it). Kept with its tests, which bound its error
// and check the device's bits against the host's.
#pragma once

#include <cstdint>

#include "backend/cuda/arch/host_device.hpp"

#if !defined(__CUDA_ARCH__)
#include <bit>
#include <cmath>
#endif

namespace h3s::cuda::attn {

inline constexpr float kExp2PolyMin = -125.0f;  // 2^n stays a normal exponent for n >= -125
inline constexpr double kExp2PolyMaxRelError = 7.5e-5;

// 2^f ~ c0 + c1 f + c2 f^2 + c3 f^3 on [-1/2, 1/2] (fp32 coefficients).
inline constexpr float kExp2PolyC0 = 0x1.fff692p-1f;
inline constexpr float kExp2PolyC1 = 0x1.62f31ap-1f;
inline constexpr float kExp2PolyC2 = 0x1.f0de1ap-3f;
inline constexpr float kExp2PolyC3 = 0x1.c3f76p-5f;

H3S_HOST_DEVICE inline float exp2_poly(float x) {
  // x + 1.5 * 2^23 rounds x to the nearest integer n, held in the sum's low
  // mantissa bits (two's complement around 2^22), so bits(j) << 23 is n in
  // the exponent field.
  constexpr float kRound = 12582912.0f;
#if defined(__CUDA_ARCH__)
  x = fmaxf(x, kExp2PolyMin);
  const float j = __fadd_rn(x, kRound);
  const float f = __fsub_rn(x, __fsub_rn(j, kRound));  // exact
  float p = __fmaf_rn(kExp2PolyC3, f, kExp2PolyC2);
  p = __fmaf_rn(p, f, kExp2PolyC1);
  p = __fmaf_rn(p, f, kExp2PolyC0);
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(j) << 23));
#else
  x = std::fmax(x, kExp2PolyMin);
  const float j = x + kRound;
  const float f = x - (j - kRound);
  float p = std::fma(kExp2PolyC3, f, kExp2PolyC2);
  p = std::fma(p, f, kExp2PolyC1);
  p = std::fma(p, f, kExp2PolyC0);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(p) + (std::bit_cast<uint32_t>(j) << 23));
#endif
}

}  // namespace h3s::cuda::attn
