// One call of the model on real inputs, with the semantics of ComfyUI's
// MiniMaxH3Model.forward for a text-to-video+audio sampling step (and the
// first-frame image-to-video keyframe): latents and raw text states in, the
// predictions out in the latents' dtypes and shapes.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "h3s/array.hpp"

namespace h3s {

// Called at each stage of a forward ("embed + refiner", "block 3/50", "final
// layer") for progress output on long runs.
using ProgressFn = std::function<void(const std::string& stage)>;

struct LatentInputs {
  // [1, C, T, H, W] bf16 or f32, C = the model's video latent channels. Odd H
  // or W are padded to the 2x2 patch as ComfyUI pads them (circular) and the
  // prediction is cropped back.
  ArrayRef video_latent;
  // [1, audio channels (32), 2, frames] bf16 or f32: the audio latent as the
  // sampler carries it (see audio_scale).
  ArrayRef audio_latent;
  // [1, L, text_dim] bf16: the text encoder's raw hidden states; the
  // condition projection and the token refiner run inside.
  ArrayRef context;
  // The sampler's sigma of this step, in [0, 1]. The model sees
  // timestep = sigma * 1000 in fp32, as ComfyUI's model_sampling hands it,
  // and derives the audio sigma with the model's two schedule shifts.
  float sigma = 1.0f;
  // Image-to-video: the keyframe latent [1, C, Tc, H, W] (H, W even and equal
  // to the video latent's) at frame 0, packed as ComfyUI packs a keyframe's
  // cond rows, with its noise augmentation (below).
  std::optional<ArrayRef> cond_latent;
  // Per-text-token modality tags (0 video, 1 text, 2 audio), L of them, or
  // empty (all text): ComfyUI's minimax_token_tags.
  std::vector<uint8_t> text_token_tags;

  // The payload fields ComfyUI's extra_conds builds for the call:
  // audio_scale: the sampler carries the audio at (sigma_v / sigma_a) x its
  // own scale; 4 (= shift 12 / audio shift 3) when sampling the packed
  // latent, 1 when the audio is not carried (no conversion).
  double audio_scale = 4.0;
  // seed of the keyframe's noise augmentation (torch.Generator("cpu")).
  uint64_t seed = 0;
  // visual_cond_noise_aug: cond rows = aug x rows + (1 - aug) x noise, at
  // timestep max(t_v, aug); 1 = no noise.
  double visual_cond_noise_aug = 0.999;
};

// What a forward measured.
struct ForwardReport {
  int64_t tokens = 0;  // the packed sequence length
  double seconds = 0.0;
  size_t arena_peak_bytes = 0;  // activation memory at most
  size_t weight_bytes = 0;      // the model's weights
  std::string weights_plan;     // resident or streamed, prefetch, bytes held
  size_t weights_peak_bytes = 0;
  size_t activation_estimate = 0;  // the placement's predicted activation peak
  std::string placement;           // where the activations lived (the planner's line)
  bool kv_on_host = false;         // the K/V store was host-staged
  uint64_t staged_to_host_bytes = 0, staged_to_device_bytes = 0;
  int64_t stock_blocks = 0, streamed_blocks = 0;
  std::vector<std::string> log;  // e.g. the self_check line
};

struct LatentOutputs {
  Array video;  // the video latent's dtype and shape
  Array audio;  // the audio latent's dtype and shape
  ForwardReport report;
};

}  // namespace h3s
