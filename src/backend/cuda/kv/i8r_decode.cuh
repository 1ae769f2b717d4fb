// The arithmetic of kvi8r's dequantisation (kvfmt/kvi8r.hpp "dequantise"),
// shared by the Hopper attention's producers (attention/attn_i8r_sm90_*load.cuh)
// and the decode kernel any sm_80+ GPU runs (kv/kvi8r_decode.cu), so both
// write the same fp16 K~ and V~.
//
// A code c in [-127, 127] becomes fp16 exactly without a conversion
// instruction: the store holds u = c + 128 (kvi8r::kCodeBias), fp16 0x64|u
// is 1024 + 128 + c; one byte permute builds a pair, one sub.f16x2 of 1152
// finishes it, one mul.rn.f16x2 applies the key's scale (the definition's
// single rounding: code x scale is exact in fp32). f16x2 arithmetic is
// sm_53+, so every image we build runs it.
#pragma once

#include <cstdint>

namespace h3s::cuda::i8r {

// Four stored codes (a 32-bit word of u = c + 128, code 0 in the low byte)
// times the key's scale (fp16, in both halves of `scale2`) -> two f16x2,
// code 0 in the low half: 0x64|u is 1024 + c + 128 exactly (10 mantissa
// bits), minus 1152 (0x6480) is c, times the scale rounds once.
__device__ __forceinline__ void dequant_f16(uint32_t u, uint32_t scale2, uint32_t& lo,
                                            uint32_t& hi) {
  constexpr uint32_t kExp = 0x64646464u;     // fp16 exponent byte of 1024
  constexpr uint32_t kOffset = 0x64806480u;  // fp16 1152 = 1024 + 128, twice
  const uint32_t a01 = __byte_perm(u, kExp, 0x4140), a23 = __byte_perm(u, kExp, 0x4342);
  uint32_t c01, c23;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(c01) : "r"(a01), "r"(kOffset));
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(c23) : "r"(a23), "r"(kOffset));
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(lo) : "r"(c01), "r"(scale2));
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(hi) : "r"(c23), "r"(scale2));
}

}  // namespace h3s::cuda::i8r
