// Deterministic synthetic weights for the presets.
#include <algorithm>
#include <cmath>
#include <future>
#include <thread>
#include <type_traits>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/packed_layout.hpp"
#include "model/weights.hpp"

namespace h3s {

namespace {

// Tensor ids for independent RNG streams.
enum Id : uint64_t {
  kQkv = 1,
  kOut,
  kFc1,
  kFc2,
  kNorm1,
  kNorm2,
  kQn,
  kKn,
  kAdaln,
  kAdalnB,
  kVideoPatch = 100,
  kAudioPatch,
  kCond,
  kTimeIn,
  kTimeOut,
  kTable,
  kFinalNorm,
  kFinalAdaln,
  kVideoOut,
  kAudioOut,
  kRefNorm,
  kBias
};

std::vector<uint16_t> normal_bf16(uint64_t seed, int64_t n, float mean, float std) {
  Rng r(seed);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = f32_to_bf16(mean + std * r.normal()).bits;
  return v;
}

std::vector<float> normal_f32(uint64_t seed, int64_t n, float mean, float std) {
  Rng r(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = mean + std * r.normal();
  return v;
}

// Bias values exactly representable in bf16 (they are stored bf16 in files).
std::vector<float> bias_bf16(uint64_t seed, int64_t n, float std) {
  Rng r(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = round_bf16(std * r.normal());
  return v;
}

// island_bf16: an fp32 island of a model with quantised layers holds bf16
// values, as ComfyUI's loader holds them (checkpoint_linear.cpp), so the random
// model equals itself written to a file and read back.
QuantLinear linear(uint64_t seed, int64_t out, int64_t in, WeightFormat f, float gain = 1.0f,
                   bool island_bf16 = false) {
  const float std = gain / std::sqrt(float(in));
  if (f == WeightFormat::f32) {
    std::vector<float> v = normal_f32(seed, out * in, 0, std);
    if (island_bf16)
      for (float& x : v) x = round_bf16(x);
    return QuantLinear::from_f32(std::move(v), out, in);
  }
  return QuantLinear::from_bf16(normal_bf16(seed, out * in, 0, std), out, in, f);
}

// Each tensor has its own seed, so building the large ones on separate
// threads gives the same values (full-size quantised blocks take tens of
// seconds on one core).
AttnWeights attn(uint64_t s, const ModelConfig& c, WeightFormat f) {
  AttnWeights a;
  auto qkv = std::async(std::launch::async,
                        [&] { return linear(mix_seed(s, kQkv), c.qkv_out(), c.hidden, f); });
  a.out = linear(mix_seed(s, kOut), c.hidden, c.inner(), f);
  a.qkv = qkv.get();
  a.q_norm = normal_bf16(mix_seed(s, kQn), c.head_dim, 1.0f, 0.1f);
  a.k_norm = normal_bf16(mix_seed(s, kKn), c.head_dim, 1.0f, 0.1f);
  return a;
}

MlpWeights mlp(uint64_t s, const ModelConfig& c, WeightFormat f) {
  MlpWeights m;
  auto fc1 = std::async(std::launch::async,
                        [&] { return linear(mix_seed(s, kFc1), 2 * c.ffn, c.hidden, f); });
  m.fc2 = linear(mix_seed(s, kFc2), c.hidden, c.ffn, f);
  m.fc1 = fc1.get();
  return m;
}

}  // namespace

size_t ModelWeights::bytes() const {
  size_t b = video_patch.weight_bytes() + audio_patch.weight_bytes() +
             condition_proj.weight_bytes() + time_in.weight_bytes() + time_out.weight_bytes() +
             adaln_t_table.size() * 4 + rope_inv_freq.size() * 4;
  auto attn_bytes = [](const AttnWeights& a) {
    return a.qkv.weight_bytes() + a.out.weight_bytes() + (a.q_norm.size() + a.k_norm.size()) * 2;
  };
  for (const auto& r : refiner)
    b += attn_bytes(r.attn) + r.mlp.fc1.weight_bytes() + r.mlp.fc2.weight_bytes() +
         (r.norm1.size() + r.norm2.size()) * 2;
  for (const auto& k : blocks)
    b += attn_bytes(k.attn) + k.mlp.fc1.weight_bytes() + k.mlp.fc2.weight_bytes() +
         (k.norm1.size() + k.norm2.size()) * 2 + k.adaln.weight_bytes();
  b += final_layer.norm.size() * 2 + final_layer.adaln.weight_bytes() +
       final_layer.video_out.weight_bytes() + final_layer.audio_out.weight_bytes();
  return b;
}

ModelWeights ModelWeights::random(const ModelConfig& cfg, WeightFormat format, uint64_t seed,
                                  const BlockProgress& on_block) {
  cfg.validate();
  if (format == WeightFormat::f32)
    fail(ErrorKind::invalid_argument, "weight format f32 is only for fp32 islands; use bf16");
  ModelWeights w;
  w.config = cfg;
  w.format = format;
  const ModelConfig& c = cfg;
  const bool curve = c.time_form == TimeForm::curve;
  const WeightFormat adaln_fmt = curve ? WeightFormat::f32 : WeightFormat::bf16;
  const bool island_bf16 = format != WeightFormat::bf16;

  w.video_patch = linear(mix_seed(seed, kVideoPatch), c.hidden, c.video_features(),
                         WeightFormat::f32, 1.0f, island_bf16);
  w.video_patch.bias = bias_bf16(mix_seed(seed, kVideoPatch, kBias), c.hidden, 0.02f);
  w.audio_patch = linear(mix_seed(seed, kAudioPatch), c.hidden, c.audio_latent, WeightFormat::f32,
                         1.0f, island_bf16);
  w.audio_patch.bias = bias_bf16(mix_seed(seed, kAudioPatch, kBias), c.hidden, 0.02f);
  w.condition_proj = linear(mix_seed(seed, kCond), c.hidden, c.text_dim, WeightFormat::bf16);
  w.condition_proj.bias = bias_bf16(mix_seed(seed, kCond, kBias), c.hidden, 0.02f);
  if (curve) {
    w.adaln_t_table = normal_f32(mix_seed(seed, kTable), c.curve_grid * c.time_dim, 0.0f, 1.0f);
  } else {
    w.time_in = linear(mix_seed(seed, kTimeIn), c.time_hidden, c.time_freq_dim, WeightFormat::f32,
                       1.0f, island_bf16);
    w.time_in.bias = bias_bf16(mix_seed(seed, kTimeIn, kBias), c.time_hidden, 0.02f);
    w.time_out = linear(mix_seed(seed, kTimeOut), c.time_dim, c.time_hidden, WeightFormat::f32,
                        1.0f, island_bf16);
    w.time_out.bias = bias_bf16(mix_seed(seed, kTimeOut, kBias), c.time_dim, 0.02f);
  }
  w.rope_inv_freq = default_inv_freq(c.rope_freqs);

  // Blocks are independent (each has its own seed): build them a few at a time
  // on their own threads (full-size quantised blocks take ~15 s each on one
  // core), with the same values whatever the thread count.
  const int64_t mod_out = ModelConfig::kBlockMods * ModelConfig::kModalities * c.hidden;
  auto refiner_block = [&](int64_t i) {
    const uint64_t s = mix_seed(seed, 1000 + uint64_t(i));
    RefinerBlockWeights r;
    r.norm1 = normal_bf16(mix_seed(s, kNorm1), c.hidden, 1.0f, 0.1f);
    r.norm2 = normal_bf16(mix_seed(s, kNorm2), c.hidden, 1.0f, 0.1f);
    r.attn = attn(s, c, format);
    r.mlp = mlp(s, c, format);
    return r;
  };
  auto dit_block = [&](int64_t i) {
    const uint64_t s = mix_seed(seed, 2000 + uint64_t(i));
    BlockWeights b;
    b.norm1 = normal_bf16(mix_seed(s, kNorm1), c.hidden, 1.0f, 0.1f);
    b.norm2 = normal_bf16(mix_seed(s, kNorm2), c.hidden, 1.0f, 0.1f);
    auto block_mlp = std::async(std::launch::async, [&] { return mlp(s, c, format); });
    b.attn = attn(s, c, format);
    b.mlp = block_mlp.get();
    // Small modulation so activations stay in a realistic range.
    b.adaln = linear(mix_seed(s, kAdaln), mod_out, c.time_dim, adaln_fmt, 0.3f, island_bf16);
    b.adaln.bias = bias_bf16(mix_seed(s, kAdalnB), mod_out, 0.05f);
    return b;
  };
  // Each block already runs ~4 threads; a few blocks at once fill a machine.
  const int64_t at_once = std::max<int64_t>(1, int64_t(std::thread::hardware_concurrency()) / 4);
  const int64_t total_blocks = c.refiner_blocks + c.blocks;
  int64_t done_blocks = 0;
  auto build_all = [&](auto& out, int64_t n, auto&& make) {
    out.resize(size_t(n));
    for (int64_t first = 0; first < n; first += at_once) {
      std::vector<std::future<std::decay_t<decltype(out[0])>>> batch;
      for (int64_t i = first; i < std::min(n, first + at_once); ++i)
        batch.push_back(std::async(std::launch::async, make, i));
      for (size_t k = 0; k < batch.size(); ++k) {
        out[size_t(first) + k] = batch[k].get();
        if (on_block) on_block(++done_blocks, total_blocks);
      }
    }
  };
  build_all(w.refiner, c.refiner_blocks, refiner_block);
  w.refiner_final_norm = normal_bf16(mix_seed(seed, kRefNorm), c.hidden, 1.0f, 0.1f);
  build_all(w.blocks, c.blocks, dit_block);

  FinalLayerWeights& f = w.final_layer;
  f.norm = normal_bf16(mix_seed(seed, kFinalNorm), c.hidden, 1.0f, 0.1f);
  f.adaln =
      linear(mix_seed(seed, kFinalAdaln), 2 * c.hidden, c.time_dim, adaln_fmt, 0.3f, island_bf16);
  f.adaln.bias = bias_bf16(mix_seed(seed, kFinalAdaln, kBias), 2 * c.hidden, 0.05f);
  f.video_out = linear(mix_seed(seed, kVideoOut), c.video_features(), c.hidden, WeightFormat::f32,
                       1.0f, island_bf16);
  f.video_out.bias = bias_bf16(mix_seed(seed, kVideoOut, kBias), c.video_features(), 0.02f);
  f.audio_out = linear(mix_seed(seed, kAudioOut), c.audio_latent, c.hidden, WeightFormat::f32, 1.0f,
                       island_bf16);
  f.audio_out.bias = bias_bf16(mix_seed(seed, kAudioOut, kBias), c.audio_latent, 0.02f);
  return w;
}

}  // namespace h3s
