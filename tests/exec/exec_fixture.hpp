// Shared set-up for executor tests: a micro H3 config (head_dim 128 and RoPE
// 96 like the real model, narrow elsewhere so tests stay fast), seeded
// weights per format, and block contexts over arbitrary layouts.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.hpp"
#include "core/rng.hpp"
#include "exec/block.hpp"
#include "exec/time_embed.hpp"
#include "model/weights.hpp"

namespace h3s::test {

inline ModelConfig micro_config() {
  ModelConfig c = ModelConfig::tiny();
  c.name = "micro";
  c.hidden = 256;
  c.heads = 2;
  c.ffn = 256;
  c.blocks = 2;
  c.refiner_blocks = 1;
  c.text_dim = 64;
  c.time_hidden = 128;
  c.time_dim = 64;
  return c;
}

inline const ModelWeights& weights_for(WeightFormat f, TimeForm form = TimeForm::full) {
  static std::map<std::pair<int, int>, std::unique_ptr<ModelWeights>> cache;
  auto& slot = cache[{int(f), int(form)}];
  if (!slot) {
    ModelConfig c = micro_config();
    if (form == TimeForm::curve) {
      c.time_form = TimeForm::curve;
      c.time_dim = 8;
    }
    slot = std::make_unique<ModelWeights>(ModelWeights::random(c, f, 1234));
  }
  return *slot;
}

// A layout with 1-row video frames (2 x 2 latent) so any length is reachable:
// text (with optional tag runs), optional cond frame, audio, video.
inline PackedLayout small_layout(const ModelConfig& c, int64_t text, int64_t audio_t,
                                 int64_t frames, bool tags, bool cond, float sigma = 0.6f) {
  LayoutSpec s;
  s.text_len = text;
  s.audio_t = audio_t;
  s.latent_t = frames;
  s.latent_h = 2;
  s.latent_w = 2;
  s.cond_first_frame = cond;
  s.sigma = sigma;
  if (tags && text > 0) {
    s.text_tags.assign(size_t(text), 1);
    for (int64_t i = 0; i < text; ++i)
      if ((i / 3) % 4 == 1) s.text_tags[size_t(i)] = uint8_t(i % 2 == 0 ? 0 : 2);
  }
  return PackedLayout::build(s, c);
}

// Everything a DiT block needs, living in one arena.
struct BlockHarness {
  HostMemory memory;
  Arena arena{memory, 0};
  std::unique_ptr<Backend> be = make_cpu_backend(3);
  const ModelWeights* w = nullptr;
  PackedLayout layout;
  OwnedTensor adaln_in, mods, rope;
  BlockContext ctx;

  BlockHarness(const ModelWeights& weights, PackedLayout l) : w(&weights), layout(std::move(l)) {
    const ModelConfig& c = w->config;
    adaln_in = adaln_input(*be, arena, *w, layout.timesteps);
    mods = adaln_project(*be, arena, w->blocks[0].adaln, adaln_in.view, "mods");
    rope = arena.tensor(DType::bf16, {layout.seq_len, c.rope_dim / 2, 2}, "rope");
    const std::vector<uint16_t> table = rope_table(layout, w->rope_inv_freq, c.rope_dim);
    be->upload(table.data(), rope.view);
    ctx.config = &c;
    ctx.layout = &layout;
    ctx.rope = rope.view;
    ctx.mods = split_block_mods(mods.view, c.hidden);
    ctx.block_index = 0;
  }
  BlockView view() const { return BlockView::dit(w->blocks[0], ctx); }

  // A random residual [seq, hidden] (bf16 bits).
  std::vector<uint16_t> random_x(uint64_t seed) const {
    Rng r(seed);
    std::vector<uint16_t> x(size_t(layout.seq_len * w->config.hidden));
    for (auto& v : x) v = f32_to_bf16(r.normal()).bits;
    return x;
  }
  Tensor tensor(std::vector<uint16_t>& x) const {
    return Tensor::contiguous(x.data(), DType::bf16, {layout.seq_len, w->config.hidden});
  }
};

// Options that really stream at test lengths: these chunks, min_tokens 0 (the
// default runs short sequences stock) and merge_tail_below 0 (1-row tails stay).
inline ExecOptions streamed_options(int64_t q, int64_t kv, int64_t mlp, int64_t kv_block = 0,
                                    int64_t final_chunk = 16384,
                                    FinalLayerGemm gemm = FinalLayerGemm::exact) {
  ExecOptions o;
  o.q_chunk = q;
  o.kv_chunk = kv;
  o.mlp_chunk = mlp;
  o.kv_block = kv_block;
  o.final_layer_chunk = final_chunk;
  o.final_layer_gemm = gemm;
  o.min_tokens = 0;
  o.merge_tail_below = 0;
  return o;
}

inline ::testing::AssertionResult bits_equal(const std::vector<uint16_t>& a,
                                             const std::vector<uint16_t>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && bad++ == 0) first = i;
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << a.size() << " values differ, first at index " << first;
}

}  // namespace h3s::test
