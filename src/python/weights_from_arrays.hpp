// Model weights from in-memory arrays (a framework's state dict), through the
// checkpoint loader's own per-layer format dispatch and checks: every format
// a file loads (bf16, int8 ConvRot, W4A8, NVFP4, curve or full time form)
// loads from arrays too, with the same messages.
//
// Nothing is copied: the loaded weights are views of the arrays themselves
// (CPU or CUDA memory), which `keep_alive` keeps referenced. Only small arrays
// whose values the loader checks (scales, biases, the comfy_quant JSON) are
// read, through a device -> host copy for CUDA arrays; arrays in a dtype the
// kernels do not read (an F16 weight, a bf16 scale) are converted into new
// host arrays. NVFP4 stays packed, as from a file: the backend's prepare
// decodes it (CUDA: on the device, reading CUDA arrays in place).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
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

// The arrays kept referenced for as long as any view of them lives. Must be
// made (and is released) with Python's GIL available: it holds Python objects.
std::shared_ptr<const void> keep_arrays_alive(std::vector<ArrayEntry> arrays);

// The whole model as views of `arrays`. lazy_blocks: the config only (every
// name and shape is still checked, no array is read or kept): for hosts that
// hand each block's tensors over per call.
// stream: the caller's CUDA stream (a cudaStream_t as an integer; 0: the legacy
// default stream): CUDA arrays are read in its order.
ModelWeights load_weights_from_arrays(const std::vector<ArrayEntry>& arrays,
                                      const std::map<std::string, std::string>& metadata,
                                      std::shared_ptr<const void> keep_alive, bool lazy_blocks,
                                      uintptr_t stream = 0);
// DiT block `index` from that block's tensors (its keys as in the model,
// "[prefix]blocks.<index>.*"), checked like a checkpoint's, as views.
BlockWeights load_block_from_arrays(const std::vector<ArrayEntry>& arrays,
                                    const std::map<std::string, std::string>& metadata,
                                    const ModelConfig& config, int64_t index,
                                    std::shared_ptr<const void> keep_alive, uintptr_t stream = 0);

}  // namespace h3s::py
