// One head vector of the fused q/k RMSNorm + split-half RoPE (in may equal out).
#pragma once

#include <cstdint>

namespace h3s::cpu {

// in/out: 128 bf16 values; w: 128 bf16 norm weights; rope: rot_dim / 2
// (cos, sin) bf16 pairs (unused when rot_dim = 0).
void rms_rope_head(const uint16_t* in, uint16_t* out, const uint16_t* w, const uint16_t* rope,
                   float eps, int64_t rot_dim);

}  // namespace h3s::cpu
