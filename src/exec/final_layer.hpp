// The final layer: RMSNorm -> (1 + scale) * . + shift (bf16) -> fp32 -> fp32
// output head, over the target video and audio segments.
#pragma once

#include "backend/backend.hpp"
#include "exec/residual_rows.hpp"
#include "h3s/options.hpp"
#include "model/weights.hpp"

namespace h3s {

struct FinalOutputs {
  OwnedTensor video;  // f32 [video rows, 96]
  OwnedTensor audio;  // f32 [audio rows, 32]
};

// chunk = 0: stock (whole span promoted at once, like ComfyUI). chunk > 0:
// norm/mod/promote per chunk; `gemm` exact = one head GEMM at full M over the
// promoted span, streamed = one GEMM per chunk. All three are bit-equal here
// because the f32 GEMM is row-invariant.
// x: the residual, resident or host-staged (its rows are read chunk by chunk).
FinalOutputs run_final_layer(Backend& be, Arena& arena, const ModelWeights& w,
                             const PackedLayout& layout, ResidualRows& x, const Tensor& adaln_in,
                             int64_t chunk, FinalLayerGemm gemm, int64_t merge_tail_below);

}  // namespace h3s
