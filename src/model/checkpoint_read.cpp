// Loading ComfyUI-format H3 checkpoints: the whole model or one DiT block,
// every tensor accounted for (read, or known to be ignorable); the config
// comes from checkpoint_config.cpp, each linear from checkpoint_linear.cpp.
#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <memory>
#include <optional>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_keys.hpp"
#include "model/checkpoint_linear.hpp"
#include "model/checkpoint_reader.hpp"

namespace h3s {

namespace {

// Tensors a valid file may carry that h3stream does not use. ComfyUI's
// per-layer attention config (".attn.comfy_attention.config", a JSON blob
// as uint8: e.g. int8 attention) names ComfyUI's kernel; h3stream runs its
// own attention and K/V tiers.
bool ignorable(std::string_view name) {
  return name.ends_with(".attn.to_gate_compress.weight") || name.ends_with(".input_scale") ||
         name.ends_with(".pre_quant_scale") || name.ends_with(".attn.comfy_attention.config");
}

// "blocks.<n>." at the start of an unprefixed key (not "token_refiner.blocks.").
bool is_dit_block_key(std::string_view key) {
  constexpr std::string_view kStem = "blocks.";
  if (key.substr(0, kStem.size()) != kStem) return false;
  size_t end = kStem.size();
  while (end < key.size() && std::isdigit(static_cast<unsigned char>(key[end]))) ++end;
  return end > kStem.size() && end < key.size() && key[end] == '.';
}

// Reads the slots the filter keeps into their weights.
template <class Keep>
void load_slots(CheckpointReader& r, const WeightSlots& slots, CheckpointSummary* summary,
                Keep&& keep) {
  for (const LinearSlot& s : slots.linears)
    if (keep(s.name)) load_linear(r, s, summary);
  for (const VectorSlot& s : slots.norms) {
    if (!keep(s.name)) continue;
    const TensorEntry& e = r.get(s.name);
    r.expect_shape(e, {s.size});
    const std::vector<float> v = r.floats(e);  // also checks the dtype
    if (e.dtype == "BF16") {
      *s.v = r.array<uint16_t>(e, summary);
      continue;
    }
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]).bits;
    *s.v = std::move(b);
  }
  for (const F32Slot& s : slots.buffers) {
    if (!keep(s.name)) continue;
    const TensorEntry& e = r.get(s.name);
    r.expect_shape(e, s.shape);
    *s.v = r.floats(e);
    for (size_t i = 0; i < s.v->size(); ++i)
      if (!std::isfinite((*s.v)[i])) r.bad("tensor '{}' element {} is not finite", e.name, i);
  }
}

}  // namespace

bool is_dit_block_data(std::string_view name) {
  constexpr std::string_view kStem = "blocks.", kRefiner = "token_refiner.";
  if (name.ends_with(".comfy_quant")) return false;
  for (size_t at = name.find(kStem); at != std::string_view::npos; at = name.find(kStem, at + 1)) {
    const bool boundary = at == 0 || name[at - 1] == '.';
    const bool refiner =
        at >= kRefiner.size() && name.substr(at - kRefiner.size(), kRefiner.size()) == kRefiner;
    size_t end = at + kStem.size();
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (boundary && !refiner && end > at + kStem.size() && end < name.size() && name[end] == '.')
      return true;
  }
  return false;
}

ModelWeights load_checkpoint(const SafetensorsFile& f, CheckpointSummary* summary,
                             const LoadOptions& options) {
  std::string prefix;
  ModelWeights w;
  w.config = detect_config(f, &prefix);
  w.refiner.resize(size_t(w.config.refiner_blocks));
  w.blocks.resize(size_t(w.config.blocks));
  CheckpointReader r(f, prefix, options.keep_alive);
  if (summary) {
    *summary = CheckpointSummary{};
    summary->prefix = prefix;
  }
  const auto skipped = [&](std::string_view key) {
    return options.skip_dit_blocks && is_dit_block_key(key);
  };
  load_slots(r, weight_slots(w), summary, [&](const std::string& name) { return !skipped(name); });
  for (const std::string& name : f.names()) {
    if (r.used().count(name) || ignorable(name)) continue;
    if (name.compare(0, prefix.size(), prefix) == 0 &&
        skipped(std::string_view(name).substr(prefix.size())))
      continue;
    r.bad("unexpected tensor '{}' (not part of an H3 model with {} blocks and {} refiner blocks)",
          name, w.config.blocks, w.config.refiner_blocks);
  }
  w.format = WeightFormat::bf16;
  if (!w.blocks.empty() && !options.skip_dit_blocks) w.format = w.blocks[0].attn.qkv.format;
  if (options.skip_dit_blocks && w.config.blocks > 0)
    if (const std::optional<LayerQuant> q = r.quant("blocks.0.attn.qkv_proj")) w.format = q->format;
  if (summary)
    for (const std::string& name : f.names()) {
      const TensorEntry& e = f.entry(name);
      summary->bytes_by_dtype[e.dtype] += e.bytes;
      summary->tensor_bytes += e.bytes;
    }
  return w;
}

BlockWeights load_dit_block(const SafetensorsFile& f, const ModelConfig& cfg, int64_t index,
                            std::shared_ptr<const void> keep_alive) {
  if (index < 0 || index >= cfg.blocks)
    fail(ErrorKind::invalid_argument, "block index {} is out of range: the model has {} blocks",
         index, cfg.blocks);
  const std::string stem = fmt::format("blocks.{}.", index);
  // The keys' common prefix: whatever stands before "blocks.<index>." in the
  // first key that has it ("", "model.diffusion_model.", ...).
  std::string prefix;
  bool found = false;
  for (const std::string& name : f.names())
    if (const size_t at = name.find(stem);
        at != std::string::npos && (at == 0 || name[at - 1] == '.')) {
      prefix = name.substr(0, at);
      found = true;
      break;
    }
  if (!found)
    fail(ErrorKind::bad_input, "{}: no tensor of block {} (expected keys '{}...')", f.path(), index,
         stem);
  ModelWeights w;
  w.config = cfg;
  w.blocks.resize(size_t(cfg.blocks));
  w.refiner.resize(size_t(cfg.refiner_blocks));
  CheckpointReader r(f, prefix, std::move(keep_alive));
  load_slots(r, weight_slots(w), nullptr,
             [&](const std::string& name) { return name.compare(0, stem.size(), stem) == 0; });
  for (const std::string& name : f.names())
    if (!r.used().count(name) && !ignorable(name))
      r.bad("unexpected tensor '{}' (not part of DiT block {})", name, index);
  return std::move(w.blocks[size_t(index)]);
}

ModelWeights load_checkpoint(const std::string& path, CheckpointSummary* summary) {
  auto f = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
  LoadOptions o;
  o.keep_alive = f;
  return load_checkpoint(*f, summary, o);
}

}  // namespace h3s
