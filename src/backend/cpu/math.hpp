// The per-element arithmetic of the CPU reference's activations (SiLU,
// SwiGLU), spelled out so every rounding is visible. Shared by the CPU ops and
// by the tests that check them against comfy-kitchen's golden vectors. The
// fixed-order dot and the online softmax's tile step, which the K/V tiers'
// definitions share, are core/dot_f32.hpp and core/online_softmax.hpp.
#pragma once

#include <cmath>

#include "core/dtype.hpp"

namespace h3s::cpu {

// SiLU in fp32, IEEE: g / (1 + exp(-g)).
inline float silu_f32(float g) {
  return g / (1.0f + std::exp(-g));
}

// Eager bf16 SwiGLU (torch on bf16 tensors): bf16(bf16(silu(g)) * u).
inline float swiglu_bf16(float g, float u) {
  return round_bf16(round_bf16(silu_f32(g)) * u);
}

// The fused fp32 SwiGLU of comfy-kitchen's int8 fc2 path, silu(g) * u, with
// IEEE exp and division: the GPU kernel uses fast-math __expf and approximate
// division, so this matches every quantised value but not every row scale
// (tests/ops/test_golden.cpp measures how close it gets).
inline float swiglu_f32(float g, float u) {
  return silu_f32(g) * u;
}

}  // namespace h3s::cpu
