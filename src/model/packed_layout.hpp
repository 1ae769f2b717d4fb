// PackedLayout: the packed single-stream sequence [text | cond | audio | video]
// as ComfyUI's MiniMax-H3 builds it (comfy/ldm/minimax/model.py PackedLayout):
// segments, per-token RoPE positions (t, h, w), the distinct timesteps and the
// modulation-row runs (mod row = timestep_index * 3 + modality tag).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/chunk_plan.hpp"
#include "model/config.hpp"

namespace h3s {

enum class SegmentKind : uint8_t { text, cond, audio, video };
std::string_view segment_name(SegmentKind k);

struct Segment {
  SegmentKind kind;
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Rows [begin, end) use modulation row `mod_row`. Absolute in a layout;
// relative to the chunk start once clipped by PackedLayout::runs_in.
struct ModRun {
  int64_t begin = 0, end = 0;
  int32_t mod_row = 0;
  bool operator==(const ModRun&) const = default;
};

// Modality tags of the adaLN tables.
enum : uint8_t { kTagVideo = 0, kTagText = 1, kTagAudio = 2 };

struct LayoutSpec {
  int64_t text_len = 0;
  int64_t latent_t = 0;  // latent frames
  int64_t latent_h = 0;  // latent height (even; 2x2 patches)
  int64_t latent_w = 0;  // latent width (even)
  int64_t audio_t = 0;   // audio latent steps (stereo: 2 rows each)
  // Image-to-video: one keyframe cond block at the target origin (ComfyUI's
  // keyframe with resolved_frame_index 0), cond_latent_t latent frames long,
  // at timestep max(t_v, visual_cond_aug) (the payload's visual_cond_noise_aug).
  bool cond_first_frame = false;
  int64_t cond_latent_t = 1;
  double visual_cond_aug = 0.999;
  // Optional per-text-token modality tags (0 video, 1 text, 2 audio): vision
  // pads inside the text span carry the video tag. Empty = all text.
  std::vector<uint8_t> text_tags;
  float sigma = 0.5f;  // video sigma of this step (model_sampling sigma)
};

// Frames at pixel size -> latent shape as the released VAE packs them.
struct VideoShape {
  int64_t frames = 0, width = 0, height = 0;
  int64_t latent_t() const { return (frames - 5) / 17 * 5 + 2; }
  int64_t latent_h() const { return height / 16; }
  int64_t latent_w() const { return width / 16; }
};

struct PackedLayout {
  int64_t seq_len = 0;
  std::vector<Segment> segments;
  std::vector<double> positions;  // [seq_len, 3] (t, h, w), float64 like ComfyUI
  float sigma = 0.0f;             // video sigma of the step
  std::vector<float> timesteps;   // distinct timesteps, ascending (fp32)
  std::vector<ModRun> mod_runs;   // absolute, covering [0, seq_len) in order
  Segment video{SegmentKind::video}, audio{SegmentKind::audio};
  int32_t video_t_row = 0, audio_t_row = 0;  // final-layer rows (timestep index)
  int64_t text_len = 0, latent_t = 0, latent_h = 0, latent_w = 0, audio_t = 0;

  // Throws Error(invalid_argument) naming the bad field.
  static PackedLayout build(const LayoutSpec& spec, const ModelConfig& cfg);

  // Mod runs clipped to `r`, made relative to r.begin.
  std::vector<ModRun> runs_in(RowRange r) const;
  int64_t mod_rows() const { return int64_t(timesteps.size()) * ModelConfig::kModalities; }
  int64_t rows_of(SegmentKind k) const;
};

// RoPE rotation table [seq_len, rope_dim/2, 2] bf16 bits as (cos, sin) pairs:
// angle = fp32(pos) * inv_freq (pairs 0-15 t, 16-31 h, 32-47 w), cos and sin in
// fp32, rounded to bf16 (docs/H3_MODEL.md section 3).
std::vector<uint16_t> rope_table(const PackedLayout& layout, std::span<const float> inv_freq,
                                 int64_t rope_dim);

// The released checkpoints' rope.inv_freq: 10000^(-i/16). Used by the presets.
std::vector<float> default_inv_freq(int64_t n);

// Audio sigma of the shifted audio schedule from the video sigma (fp32 steps
// like ComfyUI's time_shift_sigma on an fp32 tensor).
float audio_sigma(float sigma_v, double shift_v, double shift_a);

}  // namespace h3s
