// The model's forward on real inputs (include/h3s/forward.hpp): what ComfyUI's
// MiniMaxH3Model.forward does around the network for one text-to-video+audio
// (or first-frame image-to-video) sampling step, then run_forward
// (exec/forward.hpp) for the network itself:
//   sigma -> timestep (fp32, x1000 and back, clamped) -> the packed layout;
//   video latent -> circular pad to the 2x2 patch -> patch rows;
//   keyframe latent -> patch rows + its noise augmentation (torch's RNG);
//   the sampler's audio carry in, channel-major audio rows;
//   outputs -> unpatchified, cropped, in the latents' dtypes, carry undone.
#pragma once

#include "exec/forward.hpp"
#include "h3s/forward.hpp"

namespace h3s {

// One call's layout and packed inputs, validated before any work: every bad
// operand is an Error(invalid_argument) naming it, expected vs found.
struct LatentCall {
  PackedLayout layout;
  ForwardInputs inputs;
  float sigma_v = 0.0f;  // the model's video sigma (from the fp32 timestep)
  float sigma_a = 0.0f;  // the shifted audio sigma
  int64_t padded_h = 0, padded_w = 0;
};
LatentCall prepare_latent_call(const ModelConfig& config, const LatentInputs& in);

// The whole call: prepare, run_forward on backend `be`, then the outputs as
// ComfyUI returns them.
LatentOutputs run_latent_forward(Backend& be, Arena& arena, const ModelWeights& weights,
                                 const LatentInputs& in, const ExecOptions& options,
                                 const ProgressFn& progress = {});

// The outputs of a run_forward over `call` as ComfyUI returns them (exposed
// for the tests that compare run_latent_forward with run_forward).
LatentOutputs finish_latent_outputs(const LatentInputs& in, const LatentCall& call,
                                    const ForwardOutputs& out);

}  // namespace h3s
