// detect_config: an H3 checkpoint recognised, and its ModelConfig read, from
// the keys and shapes alone (no tensor data but the layers' quant configs).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cctype>
#include <set>

#include "model/checkpoint.hpp"
#include "model/checkpoint_reader.hpp"

namespace h3s {

namespace {

constexpr std::string_view kComfyPrefix = "model.diffusion_model.";

// The number of "<stem>N." indices, which must run 0..N-1 without gaps.
int64_t count_indexed(const SafetensorsFile& f, const std::string& stem) {
  std::set<int64_t> idx;
  for (const std::string& name : f.names()) {
    if (name.compare(0, stem.size(), stem) != 0) continue;
    size_t pos = stem.size(), end = pos;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (end > pos && end < name.size() && name[end] == '.') {
      // More digits than any real model has blocks: also keeps stoll in range.
      if (end - pos > 9)
        fail(ErrorKind::bad_input,
             "{}: tensor '{}' has block index '{}.', expected '{}N.' blocks numbered 0..N-1 "
             "without gaps",
             f.path(), name, name.substr(0, end), stem);
      idx.insert(std::stoll(name.substr(pos, end - pos)));
    }
  }
  // Blocks must be numbered 0..n-1 without gaps.
  int64_t n = 0;
  for (int64_t i : idx)
    if (i == n) ++n;
  if (n != int64_t(idx.size()))
    fail(ErrorKind::bad_input,
         "{}: found '{}{}.' tensors but no '{}{}.': '{}N.' blocks must be numbered 0..{} without "
         "gaps",
         f.path(), stem, *idx.rbegin(), stem, n, stem, idx.size() - 1);
  return n;
}

}  // namespace

ModelConfig detect_config(const SafetensorsFile& f, std::string* prefix_out) {
  std::string prefix;
  if (f.contains(std::string(kComfyPrefix) + "video_patch_proj.weight")) {
    prefix = kComfyPrefix;
  } else if (!f.contains("video_patch_proj.weight")) {
    fail(ErrorKind::bad_input,
         "{}: not a MiniMax-H3 checkpoint: no 'video_patch_proj.weight' (with or without the "
         "'model.diffusion_model.' prefix)",
         f.path());
  }
  if (!f.contains(prefix + "audio_patch_proj.weight"))
    fail(ErrorKind::bad_input, "{}: not a MiniMax-H3 checkpoint: no '{}audio_patch_proj.weight'",
         f.path(), prefix);
  if (prefix_out) *prefix_out = prefix;
  CheckpointReader r(f, prefix);
  auto shape = [&](const std::string& name) -> const std::vector<int64_t>& {
    if (!r.has(name)) r.bad("missing tensor '{}'", prefix + name);
    return f.entry(prefix + name).shape;
  };
  auto dim = [&](const std::string& name, size_t i) {
    const std::vector<int64_t>& s = shape(name);
    if (s.size() <= i)
      r.bad("tensor '{}' has rank {}, expected at least {}", prefix + name, s.size(), i + 1);
    if (s[i] > kMaxCheckpointDim)
      r.bad("tensor '{}' has shape [{}], above the 2^31 limit per dimension", prefix + name,
            fmt::join(s, ", "));
    return s[i];
  };

  ModelConfig c;
  c.name = "checkpoint";
  c.hidden = dim("video_patch_proj.weight", 0);
  const int64_t video_features = dim("video_patch_proj.weight", 1);
  if (video_features <= 0 || video_features % ModelConfig::kVideoPatch != 0)
    r.bad("tensor '{}video_patch_proj.weight' has {} input features, expected latent channels x 4",
          prefix, video_features);
  c.video_latent = video_features / ModelConfig::kVideoPatch;
  const int64_t video_out = dim("final_layer.video_out.weight", 0);
  if (video_out != video_features) {
    if (video_out % video_features == 0)
      r.bad(
          "tensor '{}final_layer.video_out.weight' has {} rows: a PDD head bank of {} heads, "
          "which h3stream does not support yet (expected {} rows)",
          prefix, video_out, video_out / video_features, video_features);
    r.bad(
        "tensor '{}final_layer.video_out.weight' has {} rows, expected {} (video_patch_proj "
        "inputs)",
        prefix, video_out, video_features);
  }
  c.audio_latent = dim("final_layer.audio_out.weight", 0);
  c.blocks = count_indexed(f, prefix + "blocks.");
  c.refiner_blocks = count_indexed(f, prefix + "token_refiner.blocks.");
  const std::string first = c.blocks > 0 ? "blocks.0." : "token_refiner.blocks.0.";
  if (c.blocks == 0 && c.refiner_blocks == 0)
    r.bad("no 'blocks.N.' or 'token_refiner.blocks.N.' tensors");
  c.head_dim = dim(first + "attn.q_norm.weight", 0);
  const auto [qkv_out, qkv_in] = r.logical_shape(first + "attn.qkv_proj");
  (void)qkv_in;
  if (c.head_dim <= 0 || qkv_out % (3 * c.head_dim) != 0)
    r.bad("{}attn.qkv_proj has {} outputs, not 3 x heads x head_dim {}", first, qkv_out,
          c.head_dim);
  c.heads = qkv_out / (3 * c.head_dim);
  const auto [fc1_out, fc1_in] = r.logical_shape(first + "mlp.fc1");
  (void)fc1_in;
  c.ffn = fc1_out / 2;
  c.text_dim = r.logical_shape("condition_proj").second;
  if (r.has("adaln_t_table")) {
    c.time_form = TimeForm::curve;
    const std::vector<int64_t>& t = shape("adaln_t_table");
    if (t.size() != 2) r.bad("adaln_t_table must be 2-D [grid, k], has rank {}", t.size());
    c.curve_grid = dim("adaln_t_table", 0);
    c.time_dim = dim("adaln_t_table", 1);
  } else {
    c.time_form = TimeForm::full;
    c.time_freq_dim = dim("time_embedder.proj_in.weight", 1);
    c.time_hidden = dim("time_embedder.proj_in.weight", 0);
    c.time_dim = dim("time_embedder.proj_out.weight", 0);
  }
  c.rope_freqs = dim("rope.inv_freq", 0);
  c.rope_dim = 6 * c.rope_freqs;
  try {
    c.validate();
  } catch (const Error& e) {
    r.bad("unsupported config: {}", e.what());
  }
  return c;
}

}  // namespace h3s
