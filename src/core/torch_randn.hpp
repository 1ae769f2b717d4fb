// torch.randn(n, generator=torch.Generator("cpu").manual_seed(seed)) for
// float32, as ComfyUI draws the keyframe's noise augmentation: the same
// MT19937 stream, the same 24-bit uniforms (bit-exact), the same Box-Muller
// pairing (j, j + 8) over blocks of 16 and the same redraw of the last 16
// when n is not a multiple of 16. The log / sin / cos are libm's in double,
// rounded once; torch's AVX2 kernel uses fp32 polynomial approximations, so
// a value may differ from torch's in its last bits (tests/python measures
// by how much). n must be >= 16 (torch has another path below that).
#pragma once

#include <cstdint>
#include <vector>

namespace h3s {

// The uniforms torch.rand(n, generator=...) draws: bit-exact.
std::vector<float> torch_cpu_rand(uint64_t seed, int64_t n);
std::vector<float> torch_cpu_randn(uint64_t seed, int64_t n);

}  // namespace h3s
