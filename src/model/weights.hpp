// ModelWeights: one H3 model's weights, named after the checkpoint keys
// (docs/H3_MODEL.md section 2), as views (weight_array.hpp) into a mapped file,
// arrays a loader or builder owns, or a host framework's tensors. Norm weights
// are bf16 bits; fp32 islands (patch projections, time embedder, output heads,
// curve-form adaLN) are f32. The same structs hold a backend's prepared copy
// (Backend::prepare: device views).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/config.hpp"
#include "model/quant_linear.hpp"

namespace h3s {

struct AttnWeights {
  QuantLinear qkv;               // [3 * inner, hidden], rows q | k | v
  QuantLinear out;               // [hidden, inner]
  WeightArray<uint16_t> q_norm;  // [head_dim] bf16
  WeightArray<uint16_t> k_norm;  // [head_dim] bf16
};

struct MlpWeights {
  QuantLinear fc1;  // [2 * ffn, hidden]: outputs 0..ffn-1 gate, ffn.. up
  QuantLinear fc2;  // [hidden, ffn]
};

struct BlockWeights {
  WeightArray<uint16_t> norm1, norm2;  // [hidden] bf16
  AttnWeights attn;
  MlpWeights mlp;
  // adaln_proj.linear [6 * 3 * hidden, time_dim] + bias; output index
  // modality * 6 * hidden + e * hidden + c (bf16 in the full form, f32 curve).
  QuantLinear adaln;
};

struct RefinerBlockWeights {
  WeightArray<uint16_t> norm1, norm2;
  AttnWeights attn;
  MlpWeights mlp;
};

struct FinalLayerWeights {
  WeightArray<uint16_t> norm;  // [hidden] bf16
  QuantLinear adaln;           // [2 * hidden, time_dim] + bias: shift then scale
  QuantLinear video_out;       // f32 [96, hidden] + bias
  QuantLinear audio_out;       // f32 [32, hidden] + bias
};

struct ModelWeights {
  ModelConfig config;
  WeightFormat format = WeightFormat::bf16;  // of the big block linears
  QuantLinear video_patch;                   // f32 [hidden, 96] + bias
  QuantLinear audio_patch;                   // f32 [hidden, 32] + bias
  QuantLinear condition_proj;                // bf16 [hidden, text_dim] + bias
  QuantLinear time_in;                       // f32 [time_hidden, time_freq_dim] + bias (full form)
  QuantLinear time_out;                      // f32 [time_dim, time_hidden] + bias (full form)
  std::vector<float> adaln_t_table;          // f32 [curve_grid, time_dim] (curve form)
  std::vector<float> rope_inv_freq;          // f32 [rope_freqs]
  std::vector<RefinerBlockWeights> refiner;
  WeightArray<uint16_t> refiner_final_norm;  // [hidden] bf16
  std::vector<BlockWeights> blocks;
  FinalLayerWeights final_layer;

  size_t bytes() const;

  // Deterministic synthetic weights for a config (checkpoint files are loaded
  // elsewhere). The four big linears of every block and refiner block are in
  // `format`; the rest keep their checkpoint dtypes. on_block(done, total), if
  // given, is called on the calling thread as blocks (refiner blocks, then DiT
  // blocks) finish: a full-size quantised model takes minutes.
  using BlockProgress = std::function<void(int64_t done, int64_t total)>;
  static ModelWeights random(const ModelConfig& cfg, WeightFormat format, uint64_t seed,
                             const BlockProgress& on_block = {});
};

}  // namespace h3s
