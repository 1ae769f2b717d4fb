// Rng: a small portable deterministic generator (splitmix64 + Box-Muller), so
// seeded weights and inputs are the same bits on every platform and library.
#pragma once

#include <cmath>
#include <cstdint>

namespace h3s {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 24 random bits (exact in fp32).
  float uniform() { return float(next_u64() >> 40) * (1.0f / 16777216.0f); }
  // Standard normal; computed in double and rounded, cached pair discarded for simplicity.
  float normal() {
    const double u1 = (double(next_u64() >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    const double u2 = double(next_u64() >> 11) * (1.0 / 9007199254740992.0);
    return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  int64_t below(int64_t n) { return int64_t(next_u64() % uint64_t(n)); }

 private:
  uint64_t state_;
};

// Derive an independent stream for a named part (block index, tensor id).
inline uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0) {
  Rng r(seed ^ (a * 0x100000001b3ull) ^ (b * 0xc2b2ae3d27d4eb4full));
  r.next_u64();
  return r.next_u64();
}

}  // namespace h3s
