// Model weights from in-memory arrays (a framework's state dict), through the
// checkpoint loader's own per-layer format dispatch and checks: every format
// a file loads (bf16, int8 ConvRot, W4A8, NVFP4, curve or full time form)
// loads from arrays too, with the same messages.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/weights.hpp"
#include "python/dlpack_tensor.hpp"

namespace h3s::py {

struct ArrayEntry {
  std::string name;   // checkpoint key ("model.diffusion_model." prefix allowed)
  std::string dtype;  // safetensors dtype name; empty: from the array's DLPack dtype
  ReadArray array;    // C-contiguous, CPU or CUDA memory; never written
};

// The engine keeps its own copy: CPU arrays are read in place during the
// load, CUDA arrays are first copied to host memory (synchronously) on their
// device. Throws Error(bad_input) naming the tensor and what is wrong.
// lazy_blocks: the DiT blocks stay empty (their tensors must be there, for
// detection, but their data is neither read nor copied); load_block_from_arrays
// fills one block per call.
ModelWeights load_weights_from_arrays(const std::vector<ArrayEntry>& arrays,
                                      const std::map<std::string, std::string>& metadata,
                                      bool lazy_blocks = false);
// DiT block `index` from that block's tensors (its keys as in the model,
// "[prefix]blocks.<index>.*"), checked like a checkpoint's.
BlockWeights load_block_from_arrays(const std::vector<ArrayEntry>& arrays,
                                    const std::map<std::string, std::string>& metadata,
                                    const ModelConfig& config, int64_t index);

}  // namespace h3s::py
