// Drawn checkpoint tensors: every tensor of a ComfyUI-format H3 checkpoint
// drawn directly from a seed in its stored form (quantised codes and scales
// drawn, no bf16 weight made and quantised), for full-size files whose
// values do not matter (timing runs) but must be sane: each weight's
// dequantised values have the standard deviation the seeded weights
// (ModelWeights::random) have, gain / sqrt(in), with the same small adaLN
// modulation, so a forward stays finite.
//
// A tensor is drawn in pieces of kDrawPieceBytes, each from its own RNG
// stream (the seed, the tensor's name, the piece's index), so any piece can
// be drawn on any thread in any order and the bytes never change.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "model/config.hpp"
#include "model/quant_linear.hpp"
#include "model/safetensors_layout.hpp"

namespace h3s {

inline constexpr size_t kDrawPieceBytes = size_t(1) << 20;

// The draws' definitions (what the dequantised weights' spread follows from):
// int8 codes uniform over -127..127; W4A8 levels uniform over -7..7 (codes
// 1..15) with every group scale kDrawnW4SRel; NVFP4 codes uniform over all
// 16 e2m1 values with every block scale kDrawnFp4BlockScale; normal-ish
// values are a sum of four uniforms (Irwin-Hall), within +-sqrt(12) std.
inline constexpr double kDrawnInt8CodeStd = 73.61159329;  // sqrt((255^2 - 1) / 12)
inline constexpr double kDrawnW4LevelStd = 4.320493799;   // sqrt((15^2 - 1) / 12)
inline constexpr float kDrawnW4SRel = 16.0f;              // e4m3-exact; |level x 16| <= 112
inline constexpr double kDrawnE2m1Std = 2.926174978;      // sqrt(mean of e2m1 values squared)
inline constexpr float kDrawnFp4BlockScale = 128.0f;      // e4m3-exact

enum class DrawKind : uint8_t {
  normal_bf16,       // bf16: mean + stddev x z
  normal_f32,        // f32: mean + stddev x z (rounded to a bf16 value when round_bf16)
  int8_codes,        // int8 codes of an int8 layer
  w4_codes,          // two W4A8 codes a byte (even column in the low nibble)
  fp4_codes,         // two e2m1 codes a byte (even column high), zero in the padding
  fp4_block_scales,  // `code` in cuBLAS's swizzled layout, zero in the padding
  fill_f32,          // every element `value`
  fill_u8,           // every byte `code`
  literal,           // `bytes` (a quant config's JSON, rope.inv_freq)
};

struct DrawnTensor {
  TensorDecl decl;
  DrawKind kind = DrawKind::literal;
  float mean = 0.0f, stddev = 0.0f, value = 0.0f;
  bool round_bf16 = false;
  uint8_t code = 0;
  int64_t rows = 0, cols = 0;  // fp4: the layer's [out, in] inside the padded arrays
  std::vector<std::byte> bytes;
  uint64_t stream = 0;   // the tensor's RNG stream
  int64_t block = -1;    // its DiT block, or -1
  size_t byte_size = 0;  // product(shape) x element size
};

// Every tensor write_checkpoint writes for ModelWeights::random(cfg, format,
// seed): the same names, dtypes and shapes, each with how it is drawn.
std::vector<DrawnTensor> drawn_tensors(const ModelConfig& cfg, WeightFormat format, uint64_t seed);

// Draws bytes [begin, begin + out.size()) of `t`; `begin` is a multiple of
// kDrawPieceBytes and `out` one piece (the last may be shorter).
void draw_piece(const DrawnTensor& t, size_t begin, std::span<std::byte> out);

}  // namespace h3s
