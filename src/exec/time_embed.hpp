// Timestep -> adaLN input (docs/H3_MODEL.md section 3): the full form's sinusoid +
// time-embedder MLP, or the curve form's table lerp.
#pragma once

#include "backend/backend.hpp"
#include "model/weights.hpp"

namespace h3s {

// The adaLN input for every distinct timestep: full form SiLU(bf16(t_emb))
// as bf16 [T, time_dim]; curve form lerp(table) as f32 [T, time_dim].
OwnedTensor adaln_input(Backend& be, Arena& arena, const ModelWeights& w,
                        const std::vector<float>& timesteps);

// One adaLN projection of the adaLN input as bf16 [T, lin.out]; the curve
// form projects in fp32 and rounds, like `.to(h.dtype)` in ComfyUI.
OwnedTensor adaln_project(Backend& be, Arena& arena, const QuantLinear& lin, const Tensor& adaln_in,
                          const char* what);

}  // namespace h3s
