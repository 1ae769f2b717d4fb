// Checkpoints in ComfyUI's MiniMax-H3 format (safetensors): detection of the
// config from the keys, loading every weight format per layer, and writing
// files ComfyUI's loader accepts. Layouts: docs/FORMATS.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace h3s {

// One layer's quantisation config: the `comfy_quant` JSON (a U8 tensor per
// layer) or an entry of the header's `_quantization_metadata` {"layers": {...}}.
struct LayerQuant {
  WeightFormat format = WeightFormat::bf16;
  bool convrot = false;
  int64_t convrot_group = 256;
  int64_t group_size = 16;
  // "full_precision_matrix_mult": ComfyUI dequantises the weight to bf16 and
  // multiplies in bf16 (no activation quantiser); the loader does the same.
  bool full_precision = false;
};

// Parses one layer's JSON; throws Error(bad_input) naming `where` on anything
// malformed (not an object, missing or unknown "format", bad group sizes).
LayerQuant parse_comfy_quant(std::string_view json, const std::string& where);
// The JSON h3stream writes for a format (the strings ComfyUI's writer emits).
std::string comfy_quant_json(WeightFormat f);

struct CheckpointSummary {
  std::string prefix;  // "" or "model.diffusion_model."
  struct Layer {
    std::string name;
    WeightFormat format;
    size_t bytes;  // bytes of the layer's tensors in the file
    // An fp32 island of a file with quantised layers: its values are rounded
    // to bf16 at load, as ComfyUI's loader holds them (docs/H3_MODEL.md section 2).
    bool held_bf16 = false;
    // Stored in `format` but flagged full_precision_matrix_mult: dequantised
    // to bf16 at load, multiplied in bf16 (quant_linear.hpp).
    bool full_precision = false;
  };
  std::vector<Layer> linears;                    // every linear, in model order
  std::map<std::string, size_t> bytes_by_dtype;  // file dtype -> bytes
  size_t tensor_bytes = 0;
  // Weight bytes the loaded arrays view in place (LoadOptions::keep_alive) and
  // bytes they hold as copies (converted dtypes, misaligned data, decodes).
  size_t viewed_bytes = 0, copied_bytes = 0;
};

// Detects an H3 checkpoint and its config from the keys and shapes.
ModelConfig detect_config(const SafetensorsFile& f, std::string* prefix = nullptr);

struct LoadOptions {
  // Leave every DiT block empty (their tensors are still detected and
  // accepted, not read): for hosts that hand the engine one block's tensors
  // per call (load_dit_block) instead of a second copy of the whole model.
  bool skip_dit_blocks = false;
  // Keeps the file's tensor memory alive (the mapped file itself, or a host
  // framework's arrays): with it, every array already in the form h3stream
  // computes with (and aligned for its type) is a view into that memory, no
  // copy; without it every array is copied. Device entries (from_entries) are
  // always views and need it.
  std::shared_ptr<const void> keep_alive;
};

// True for a DiT block's tensor data, which a host handing tensors over for a
// skip_dit_blocks load may leave unreadable (the Python module passes GPU
// pointers there): a "blocks.<n>." key at a name boundary after any prefix,
// but not the token refiner's blocks and not a ".comfy_quant" config (the
// detection reads those). load_checkpoint with skip_dit_blocks reads no byte
// of a tensor this accepts (fuzz/fuzz_checkpoint.cpp checks it).
bool is_dit_block_data(std::string_view name);

// Loads every weight, validating names, dtypes, shapes and scales; unknown or
// missing tensors are errors naming the file and the tensor.
ModelWeights load_checkpoint(const SafetensorsFile& f, CheckpointSummary* summary = nullptr,
                             const LoadOptions& options = {});
// Maps the file and views its weights in place (the mapping lives as long as
// any loaded array): no second copy of the model in memory.
ModelWeights load_checkpoint(const std::string& path, CheckpointSummary* summary = nullptr);

// DiT block `index` of a model with config `cfg` from tensors named
// "[prefix]blocks.<index>.*" (a file or a framework's block state dict with
// the keys it has in the model), with the per-layer dispatch and checks of
// load_checkpoint. Any other tensor in `f` is an error naming it.
// keep_alive: as in LoadOptions (views into f's memory when given).
BlockWeights load_dit_block(const SafetensorsFile& f, const ModelConfig& cfg, int64_t index,
                            std::shared_ptr<const void> keep_alive = {});

// Writes `w` in ComfyUI's layout: quantised layers with their comfy_quant
// tensors, plain layers in their dtypes, fp32 islands in F32.
void write_checkpoint(const ModelWeights& w, const std::string& path,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace h3s
