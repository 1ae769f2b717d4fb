// The int8 ConvRot activation quantiser of `int8_tensorwise` checkpoints,
// bit-exactly as comfy-kitchen's quantize_int8_rowwise_convrot64 computes it
// (docs/H3_MODEL.md section 4, golden vectors in tests/data/golden). It belongs to
// the weight format, so every backend reproduces this definition.
#pragma once

#include <cstdint>

namespace h3s {

// Rotate 256 consecutive values in place by the normalised Hadamard
// (h4 x h4 x h4 x h4) / 16: four radix-4 stages with strides 1, 4, 16, 64,
// each output a fixed left-to-right fp32 expression times 0.5.
void convrot_rotate_group(float* v);

// One row of k values (k a multiple of 256): rotate each group, absmax over
// the unrounded result (NaN ignored), scale = max(min(absmax, bf16 max) *
// fp32(1/127), 1e-30), q = clamp(rne(bf16(bf16(r) / bf16(scale))), -128, 127)
// with NaN -> -128.
void quantize_row_convrot(const float* x, int64_t k, int8_t* q, float* scale);

// The same on a row that is already rotated (e.g. the fused SwiGLU output
// written into a rotation buffer): absmax, scale and rounding only.
void quantize_rotated_row(const float* r, int64_t k, int8_t* q, float* scale);

}  // namespace h3s
