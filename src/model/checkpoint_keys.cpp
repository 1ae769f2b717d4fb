// Key names of ComfyUI's MiniMax-H3 state dict (docs/H3_MODEL.md section 2).
#include "model/checkpoint_keys.hpp"

#include <fmt/format.h>

namespace h3s {

WeightSlots weight_slots(ModelWeights& w) {
  const ModelConfig& c = w.config;
  const bool curve = c.time_form == TimeForm::curve;
  const LinearRole adaln_role = curve ? LinearRole::island : LinearRole::plain;
  WeightSlots s;
  auto lin = [&](std::string name, QuantLinear& q, int64_t out, int64_t in, bool bias,
                 LinearRole role) {
    s.linears.push_back({std::move(name), &q, out, in, bias, role});
  };
  auto norm = [&](std::string name, WeightArray<uint16_t>& v, int64_t n) {
    s.norms.push_back({std::move(name), &v, n});
  };
  lin("video_patch_proj", w.video_patch, c.hidden, c.video_features(), true, LinearRole::island);
  lin("audio_patch_proj", w.audio_patch, c.hidden, c.audio_latent, true, LinearRole::island);
  lin("condition_proj", w.condition_proj, c.hidden, c.text_dim, true, LinearRole::plain);
  if (curve) {
    s.buffers.push_back({"adaln_t_table", &w.adaln_t_table, {c.curve_grid, c.time_dim}});
  } else {
    lin("time_embedder.proj_in", w.time_in, c.time_hidden, c.time_freq_dim, true,
        LinearRole::island);
    lin("time_embedder.proj_out", w.time_out, c.time_dim, c.time_hidden, true, LinearRole::island);
  }
  s.buffers.push_back({"rope.inv_freq", &w.rope_inv_freq, {c.rope_freqs}});
  auto block_common = [&](const std::string& p, WeightArray<uint16_t>& n1,
                          WeightArray<uint16_t>& n2, AttnWeights& a, MlpWeights& m) {
    norm(p + "norm1.weight", n1, c.hidden);
    norm(p + "norm2.weight", n2, c.hidden);
    lin(p + "attn.qkv_proj", a.qkv, c.qkv_out(), c.hidden, false, LinearRole::block);
    norm(p + "attn.q_norm.weight", a.q_norm, c.head_dim);
    norm(p + "attn.k_norm.weight", a.k_norm, c.head_dim);
    lin(p + "attn.out_proj", a.out, c.hidden, c.inner(), false, LinearRole::block);
    lin(p + "mlp.fc1", m.fc1, 2 * c.ffn, c.hidden, false, LinearRole::block);
    lin(p + "mlp.fc2", m.fc2, c.hidden, c.ffn, false, LinearRole::block);
  };
  for (size_t i = 0; i < w.refiner.size(); ++i) {
    RefinerBlockWeights& r = w.refiner[i];
    block_common(fmt::format("token_refiner.blocks.{}.", i), r.norm1, r.norm2, r.attn, r.mlp);
  }
  norm("token_refiner.final_norm.weight", w.refiner_final_norm, c.hidden);
  const int64_t mods = ModelConfig::kBlockMods * ModelConfig::kModalities * c.hidden;
  for (size_t i = 0; i < w.blocks.size(); ++i) {
    BlockWeights& b = w.blocks[i];
    const std::string p = fmt::format("blocks.{}.", i);
    block_common(p, b.norm1, b.norm2, b.attn, b.mlp);
    lin(p + "adaln_proj.linear", b.adaln, mods, c.time_dim, true, adaln_role);
  }
  FinalLayerWeights& f = w.final_layer;
  norm("final_layer.norm.weight", f.norm, c.hidden);
  lin("final_layer.adaln_proj.linear", f.adaln, 2 * c.hidden, c.time_dim, true, adaln_role);
  lin("final_layer.video_out", f.video_out, c.video_features(), c.hidden, true, LinearRole::island);
  lin("final_layer.audio_out", f.audio_out, c.audio_latent, c.hidden, true, LinearRole::island);
  return s;
}

}  // namespace h3s
