// Single-tile probes of the sm_90a primitives in src/backend/cuda/arch (TMA
// descriptors and loads, mbarriers, wgmma descriptors and MMAs) and of
// device arithmetic the host reproduces, run by test_arch_gpu.cpp against
// CPU results. Defined in arch_probe.cu.
#pragma once

#include <cstdint>
#include <vector>

namespace h3s::test {

inline constexpr int kProbeM = 64, kProbeN = 128, kProbeK = 64;

// C [64 x 128] fp32 = A [64 x 64] B [128 x 64]^T (bf16 bits, both K-major),
// with A and B loaded by TMA (128-byte swizzle) onto one mbarrier and
// multiplied by four m64n128k16 wgmmas through the attention kernel's
// descriptors.
std::vector<float> wgmma_tma_probe(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b);

// exp2_poly (attention/attn_exp2_poly.hpp) of each x on the device, one
// thread an element.
std::vector<float> exp2_poly_probe(const std::vector<float>& x);

}  // namespace h3s::test
