// QuantLinear: one linear layer's weight in the format it is stored in.
//
// Layouts are row-major [out, in] as in the checkpoints (docs/H3_MODEL.md 2, 4, 5):
//  - bf16 / f32: plain weights;
//  - int8 (`int8_tensorwise` with ConvRot): int8 [out, in] already rotated per
//    256-wide input group, one fp32 scale per output row;
//  - w4a8 (`asym_w4a8_int8`): 4-bit codes [out, in/2] (even column in the LOW
//    nibble), e4m3 group scales [out, in/16], fp32 per-channel scale [out],
//    optional 16-entry codebook. Loaded packed (what a file or a host framework
//    holds, and what CUDA's gemm_w4a8 decodes in the kernel); the CPU backend's
//    prepare decodes it to int8 (`w_i8`) once, so its int8 GEMM serves both;
//  - nvfp4: e2m1 codes [round16(out), round16(in)/2] (even column in the HIGH
//    nibble), e4m3 block scales (one per 16 inputs) in cuBLAS's swizzled
//    layout, fp32 global scale. Loaded packed; Hopper and the CPU have no fp4
//    GEMM, so Backend::prepare dequantises it to bf16 once (`w_bf16`: a host
//    loop on the CPU, a kernel on CUDA, which reads ComfyUI's device arrays in
//    place) and it multiplies as bf16.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "model/weight_array.hpp"

namespace h3s {

enum class WeightFormat : uint8_t { bf16, f32, int8, w4a8, nvfp4 };
std::string_view format_name(WeightFormat f);
// "bf16", "int8", "w4a8", "nvfp4" (and "f32"); throws naming the valid ones.
WeightFormat parse_format(std::string_view s);

inline constexpr int64_t kConvRotGroup = 256;
inline constexpr int64_t kW4Group = 16;

// One linear layer's weight: its format, shape and arrays as views
// (weight_array.hpp). A loader or builder fills the arrays of the stored
// format; Backend::prepare makes the form a backend's kernels read (on the
// CPU the int8 decode of w4a8; on CUDA device copies, or the caller's own
// device arrays used in place).
struct QuantLinear {
  WeightFormat format = WeightFormat::bf16;
  int64_t out = 0, in = 0;
  uint64_t generation = 0;          // new_weight_generation() of the arrays' content
  WeightArray<uint16_t> w_bf16;     // bf16 bits [out, in]
  WeightArray<float> w_f32;         // [out, in]
  WeightArray<int8_t> w_i8;         // int8 [out, in] (int8, and w4a8 decoded)
  WeightArray<float> w_scale;       // [out]: weight_scale (int8) or s_channel (w4a8)
  WeightArray<uint8_t> w4_codes;    // w4a8 packed codes [out, in/2]
  WeightArray<uint8_t> w4_s_rel;    // w4a8 e4m3 group scales [out, in/16]
  WeightArray<float> w4_codebook;   // empty, or 16 levels
  WeightArray<uint8_t> fp4_codes;   // nvfp4 [round16(out), round16(in) / 2]
  WeightArray<uint8_t> fp4_scales;  // nvfp4 e4m3, swizzled [round128(N'), round4(K'/16)]
  float fp4_global = 0.0f;          // nvfp4 weight_scale_2
  WeightArray<float> bias;          // empty, or [out] (bf16 biases held exactly in fp32)

  bool has_bias() const { return !bias.empty(); }
  // Where the arrays the format computes with live (host for an empty layer).
  Device device() const;
  // Throws Error(invalid_argument) naming `op` when the arrays the format
  // computes with are missing or the wrong size.
  void check_complete(const char* op) const;
  // Bytes of every array held (the stored and any decoded form).
  size_t weight_bytes() const;

  // From a bf16 master weight [out, in] (bits). int8 and w4a8 rotate by the
  // ConvRot Hadamard and quantise exactly like comfy-kitchen's weight path;
  // w4a8 also carries its int8 decode and nvfp4 its bf16 decode.
  static QuantLinear from_bf16(std::span<const uint16_t> w, int64_t out, int64_t in,
                               WeightFormat format);
  static QuantLinear from_f32(std::vector<float> w, int64_t out, int64_t in);
};

// Decode w4a8 codes (host arrays) to int8: w8 = clamp(rne(level * float(s_rel)),
// -127, 127), level = codebook[code] or code - 8 (docs/H3_MODEL.md 5). The first
// returns the int8 array, the second stores it in q.w_i8.
std::vector<int8_t> decode_w4a8_values(const QuantLinear& q);
void decode_w4a8(QuantLinear& q);

// Decode nvfp4 (host arrays) to bf16: w = bf16(e2m1[code] * (e4m3[scale] *
// global)), the order comfy-kitchen's dequantisation multiplies
// (tests/model/test_nvfp4_golden.cpp); stored in q.w_bf16.
std::vector<uint16_t> decode_nvfp4_values(const QuantLinear& q);
void decode_nvfp4(QuantLinear& q);

// The bf16 weight ComfyUI multiplies a ConvRot layer flagged
// `full_precision_matrix_mult` with (host arrays), the rotation undone
// per 256-wide input group by the same four fp32 stages (H256 is its own
// inverse), rounded to bf16 once at the end (comfy-kitchen's CUDA
// dequantisation, as its source reads):
//   int8: w = bf16(H256(float(q) * weight_scale[n]));
//   w4a8: w = bf16(H256(bf16(float(w8) * s_channel[n]))), w8 the int8 decode
//         (decode_w4a8_values): ComfyUI rounds to bf16 before rotating back.
std::vector<uint16_t> dequantise_convrot_bf16(const QuantLinear& q);

// Byte offset of the block scale for row r, block c in cuBLAS's swizzled
// layout with `cols` = round4(K'/16) blocks per padded row.
int64_t nvfp4_scale_offset(int64_t r, int64_t c, int64_t cols);
inline int64_t round_up(int64_t v, int64_t m) {
  return (v + m - 1) / m * m;
}

}  // namespace h3s
