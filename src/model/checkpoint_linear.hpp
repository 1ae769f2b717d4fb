// Loading one linear layer from a checkpoint: every weight format ComfyUI
// writes (bf16, fp32 islands, int8 ConvRot, W4A8, NVFP4), its scales and
// bias, each validated against the layer's slot. Internal to src/model.
#pragma once

#include "model/checkpoint_keys.hpp"
#include "model/checkpoint_reader.hpp"

namespace h3s {

// Fills *s.q from the file (views where the reader may keep them), records
// the layer in `summary` if given; bad input names the tensor and the fix.
void load_linear(CheckpointReader& r, const LinearSlot& s, CheckpointSummary* summary);

}  // namespace h3s
