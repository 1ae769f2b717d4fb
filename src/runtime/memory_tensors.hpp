// A model's tensors already in memory (a host framework's state dict, an
// embedding program's arrays) as a SafetensorsFile, so that the checkpoint
// loader reads them with its own per-layer format dispatch and checks: every
// format a file loads loads from memory too, with the same messages.
//
// Nothing is copied: the loaded weights are views of the memory itself (host
// or CUDA), kept referenced by the caller's keep_alive. Only small tensors
// whose values the loader checks (scales, biases, comfy_quant JSON) are read,
// CUDA ones through a device -> host copy in the caller's stream order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace h3s {

struct MemoryTensor {
  TensorEntry entry;    // name, safetensors dtype, shape, data, bytes, device
  int cuda_device = 0;  // the GPU of a Device::cuda entry
};

// `source` stands for a file path in messages ("tensors", "arrays").
// stream: the caller's cudaStream_t as an integer (0: the legacy default
// stream); CUDA entries are read in its order.
SafetensorsFile memory_tensors_file(std::vector<MemoryTensor> tensors,
                                    std::map<std::string, std::string> metadata,
                                    const std::string& source, uintptr_t stream = 0);

// The whole model as views of f's memory (kept by keep_alive). lazy_blocks:
// the config only: every name and shape is still checked, but no DiT block
// tensor is read or referenced (hosts that hand each block over per call).
ModelWeights load_model_from_memory(const SafetensorsFile& f,
                                    std::shared_ptr<const void> keep_alive, bool lazy_blocks);

}  // namespace h3s
