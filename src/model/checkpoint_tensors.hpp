// The tensors one linear layer is stored as in a ComfyUI-format checkpoint:
// the one definition of their names, dtypes and shapes per weight format,
// shared by the writer of built or loaded weights (checkpoint_write.cpp)
// and the streaming writer of drawn weights (checkpoint_drawn.cpp), so the
// two always write the same keys.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/checkpoint_keys.hpp"
#include "model/quant_linear.hpp"

namespace h3s {

enum class LinearPart : uint8_t {
  weight,       // the weight or its codes
  scale,        // int8 weight_scale [out, 1]
  s_rel,        // w4a8 e4m3 group scales
  s_channel,    // w4a8 fp32 per-channel scales
  codebook,     // w4a8 16 levels (optional)
  block_scale,  // nvfp4 e4m3 block scales, swizzled
  global,       // nvfp4 weight_scale_2 (a scalar)
  comfy_quant,  // the layer's quant config JSON as U8
  bias,
};

struct LinearTensor {
  LinearPart part;
  std::string name;  // full key
  std::string dtype;
  std::vector<int64_t> shape;
};

struct LinearStorage {
  WeightFormat format = WeightFormat::bf16;
  bool codebook = false;  // w4a8 only
  // A bias in BF16 (ComfyUI's dtype for a bf16 layer's bias), else F32.
  bool bias_bf16 = false;
};

// The layer's tensors for `s.name`, [s.out, s.in] and s.bias, stored as `st`.
std::vector<LinearTensor> linear_tensors(const LinearSlot& s, const LinearStorage& st);

}  // namespace h3s
