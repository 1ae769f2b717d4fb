// torch's CPU normal_fill (aten/src/ATen/native/cpu/DistributionTemplates.h)
// over its MT19937 generator (ATen/core/MT19937RNGEngine.h, which is the
// standard MT19937 seeded with the low 32 bits of the seed).
#include "core/torch_randn.hpp"

#include <cmath>
#include <numbers>
#include <random>

#include "core/error.hpp"

namespace h3s {

namespace {

// uniform_real_distribution<float>(0, 1): the low 24 bits of one draw.
float uniform24(std::mt19937& g) {
  constexpr uint32_t kMask = (uint32_t(1) << 24) - 1;
  constexpr float kScale = 1.0f / float(uint32_t(1) << 24);
  return float(uint32_t(g()) & kMask) * kScale;
}

// Box-Muller over the pairs (j, j + 8) of 16 uniforms, in place.
void normal_fill_16(float* d) {
  const double two_pi = 2.0 * std::numbers::pi;
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - d[j], u2 = d[j + 8];
    const double radius = std::sqrt(-2.0 * std::log(double(u1)));
    const double theta = double(float(two_pi) * u2);
    d[j] = float(radius * std::cos(theta));
    d[j + 8] = float(radius * std::sin(theta));
  }
}

}  // namespace

std::vector<float> torch_cpu_rand(uint64_t seed, int64_t n) {
  if (n < 0) fail(ErrorKind::invalid_argument, "torch_cpu_rand: n = {} must be >= 0", n);
  std::mt19937 g(uint32_t(seed & 0xffffffffu));
  std::vector<float> v(size_t(n), 0.0f);
  for (float& x : v) x = uniform24(g);
  return v;
}

std::vector<float> torch_cpu_randn(uint64_t seed, int64_t n) {
  if (n < 16)
    fail(ErrorKind::invalid_argument,
         "torch_cpu_randn: n = {} must be >= 16 (torch draws fewer values another way)", n);
  std::mt19937 g(uint32_t(seed & 0xffffffffu));
  std::vector<float> v(size_t(n), 0.0f);
  for (float& x : v) x = uniform24(g);
  for (int64_t i = 0; i + 16 <= n; i += 16) normal_fill_16(v.data() + i);
  if (n % 16 != 0) {  // torch redraws the last 16 and transforms them again
    float* tail = v.data() + (n - 16);
    for (int j = 0; j < 16; ++j) tail[j] = uniform24(g);
    normal_fill_16(tail);
  }
  return v;
}

}  // namespace h3s
