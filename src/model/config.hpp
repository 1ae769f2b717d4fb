// ModelConfig: the shape of an H3 DiT, with the presets `h3` (the released
// model, docs/H3_MODEL.md section 1) and `tiny` (same head layout, small width).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace h3s {

// How timesteps become the adaLN input (docs/H3_MODEL.md section 3).
enum class TimeForm : uint8_t {
  full,   // time_embedder MLP (fp32), adaln linear on SiLU(t_emb) in bf16
  curve,  // adaln_t_table lerp (fp32), adaln linear in fp32, no SiLU
};

struct ModelConfig {
  std::string name;
  int64_t hidden = 5376;
  int64_t heads = 56;
  int64_t head_dim = 128;
  int64_t ffn = 14336;
  int64_t blocks = 50;
  int64_t refiner_blocks = 2;
  int64_t rope_dim = 96;      // leading dims of each head that RoPE rotates
  int64_t rope_freqs = 16;    // inv_freq length: one per axis pair
  int64_t video_latent = 24;  // channels; patch 1x2x2 -> 96 features per row
  int64_t audio_latent = 32;
  int64_t text_dim = 5120;
  int64_t time_freq_dim = 256;  // sinusoidal input of the time embedder
  int64_t time_hidden = 5376;   // time embedder hidden width
  int64_t time_dim =
      2688;  // t_emb width (adaln input); k of adaln_t_table [G, k] in the curve form
  TimeForm time_form = TimeForm::full;
  int64_t curve_grid = 1025;  // rows of adaln_t_table in the curve form
  float eps = 1e-5f;
  double sigma_shift_video = 12.0;
  double sigma_shift_audio = 3.0;

  static constexpr int64_t kModalities = 3;  // 0 video, 1 text, 2 audio
  static constexpr int64_t kBlockMods = 6;   // shift/scale/gate for msa and mlp
  static constexpr int64_t kVideoPatch = 4;  // 1 x 2 x 2

  int64_t inner() const { return heads * head_dim; }
  int64_t qkv_out() const { return 3 * inner(); }
  int64_t video_features() const { return video_latent * kVideoPatch; }

  // Throws Error(invalid_argument) naming the first inconsistent field.
  void validate() const;

  static ModelConfig h3();
  static ModelConfig tiny();
  // "h3" or "tiny"; throws naming the valid presets otherwise.
  static ModelConfig preset(std::string_view name);
};

}  // namespace h3s
