// `h3s forward`: the model on real inputs from a safetensors file, through the
// public API (include/h3s/engine.hpp), outputs to a safetensors file; and
// `h3s make-inputs`, which writes such an inputs file with random latents.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "h3s/options.hpp"

namespace h3s::cli {

struct ForwardArgs {
  std::string checkpoint, inputs, output;
  std::string backend = "cpu";
  bool stock = false, json = false;
  int threads = 0;
  std::string memory_budget = "0", vram_budget = "0", final_gemm = "exact";
  double audio_scale = 4.0, cond_noise_aug = 0.999;
  uint64_t seed = 0;
  ExecOptions exec;
};
void add_forward_flags(CLI::App& cmd, ForwardArgs& a);
int run_forward_cmd(ForwardArgs& a);

struct MakeInputsArgs {
  std::string checkpoint, output, dtype = "bf16";
  int64_t latent_t = 3, latent_h = 8, latent_w = 8, audio_frames = 10, text_len = 16;
  int64_t cond_frames = 0;
  float sigma = 0.7f;
  uint64_t seed = 1;
};
void add_make_inputs_flags(CLI::App& cmd, MakeInputsArgs& a);
int run_make_inputs(const MakeInputsArgs& a);

}  // namespace h3s::cli
