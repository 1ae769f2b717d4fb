// The forward on real inputs (exec/latent_forward): equal, bit for bit, to
// run_forward on the same tensors packed by an independent restatement of
// ComfyUI's preprocessing here; streamed == stock through it; bad operands
// named before any work.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/dtype.hpp"
#include "core/torch_randn.hpp"
#include "exec/exec_fixture.hpp"
#include "exec/latent_forward.hpp"

namespace h3s::test {
namespace {

// Random latents of a shape and dtype, owned.
Array random_array(DType t, std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  Array a(t, std::move(shape));
  Rng r(seed);
  for (int64_t i = 0; i < a.numel(); ++i) {
    const float v = scale * r.normal();
    if (t == DType::bf16)
      a.data<uint16_t>()[i] = f32_to_bf16(v).bits;
    else
      a.data<float>()[i] = v;
  }
  return a;
}

float at(const Array& a, int64_t i) {
  return a.dtype == DType::bf16 ? bf16_to_f32(bf16{a.data<uint16_t>()[i]}) : a.data<float>()[i];
}

struct Case {
  DType video_dtype = DType::bf16, audio_dtype = DType::bf16;
  int64_t t = 2, h = 5, w = 6, frames = 3, text = 4, cond_t = 0;
  float sigma = 0.6f;
  double audio_scale = 4.0, aug = 0.999;
};

struct Inputs {
  Array video, audio, context, cond;
  LatentInputs in;
};

Inputs make_inputs(const ModelConfig& c, const Case& k) {
  Inputs x;
  x.video = random_array(k.video_dtype, {1, c.video_latent, k.t, k.h, k.w}, 11);
  x.audio = random_array(k.audio_dtype, {1, c.audio_latent, 2, k.frames}, 12);
  x.context = random_array(DType::bf16, {1, k.text, c.text_dim}, 13, 0.5f);
  x.in.video_latent = x.video.ref();
  x.in.audio_latent = x.audio.ref();
  x.in.context = x.context.ref();
  x.in.sigma = k.sigma;
  x.in.audio_scale = k.audio_scale;
  x.in.visual_cond_noise_aug = k.aug;
  x.in.seed = 5;
  if (k.cond_t > 0) {
    x.cond = random_array(k.video_dtype,
                          {1, c.video_latent, k.cond_t, k.h + k.h % 2, k.w + k.w % 2}, 14);
    x.in.cond_latent = x.cond.ref();
  }
  return x;
}

// ComfyUI's preprocessing restated element by element: the packed rows, the
// layout, and after run_forward the outputs, for comparison with the engine's.
struct Restated {
  PackedLayout layout;
  ForwardInputs in;
  float sigma_v = 0, sigma_a = 0;
};

Restated restate(const ModelConfig& c, const Case& k, const Inputs& x) {
  Restated r;
  const float ts = k.sigma * 1000.0f;  // model_sampling.timestep, then / 1000 and clamp
  r.sigma_v = std::max(ts / 1000.0f, 1e-6f);
  r.sigma_a = audio_sigma(r.sigma_v, c.sigma_shift_video, c.sigma_shift_audio);
  const int64_t hp = k.h + k.h % 2, wp = k.w + k.w % 2;  // circular pad to 2 x 2
  LayoutSpec s;
  s.text_len = k.text;
  s.latent_t = k.t;
  s.latent_h = hp;
  s.latent_w = wp;
  s.audio_t = k.frames;
  s.sigma = r.sigma_v;
  s.cond_first_frame = k.cond_t > 0;
  s.cond_latent_t = std::max<int64_t>(k.cond_t, 1);
  s.visual_cond_aug = k.aug;
  r.layout = PackedLayout::build(s, c);
  // patchify: row (t, i, j), feature c * 4 + ph * 2 + pw, value x[c, t, 2i+ph, 2j+pw]
  auto rows_of = [&](const Array& lat, int64_t frames, int64_t h, int64_t w) {
    std::vector<float> rows;
    for (int64_t t = 0; t < frames; ++t)
      for (int64_t i = 0; i < hp / 2; ++i)
        for (int64_t j = 0; j < wp / 2; ++j)
          for (int64_t ch = 0; ch < c.video_latent; ++ch)
            for (int64_t ph = 0; ph < 2; ++ph)
              for (int64_t pw = 0; pw < 2; ++pw) {
                const int64_t y = (2 * i + ph) < h ? 2 * i + ph : 0;  // the wrapped pad row
                const int64_t xx = (2 * j + pw) < w ? 2 * j + pw : 0;
                rows.push_back(at(lat, ((ch * frames + t) * h + y) * w + xx));
              }
    return rows;
  };
  if (k.cond_t > 0) {
    std::vector<float> cond = rows_of(x.cond, k.cond_t, hp, wp);
    if (k.aug < 1.0) {
      const std::vector<float> noise = torch_cpu_randn(5, int64_t(cond.size()));
      for (size_t i = 0; i < cond.size(); ++i)
        cond[i] = float(k.aug) * cond[i] + float(1.0 - k.aug) * noise[i];
    }
    r.in.video_rows = cond;
  }
  const std::vector<float> video = rows_of(x.video, k.t, k.h, k.w);
  r.in.video_rows.insert(r.in.video_rows.end(), video.begin(), video.end());
  // pack_audio: row ch * T + t, column c; the network sees audio * carry
  const bool bf = k.audio_dtype == DType::bf16;
  const float carry = bf ? round_bf16(r.sigma_a / r.sigma_v) : r.sigma_a / r.sigma_v;
  for (int64_t ch = 0; ch < 2; ++ch)
    for (int64_t t = 0; t < k.frames; ++t)
      for (int64_t a = 0; a < c.audio_latent; ++a) {
        const float v = at(x.audio, (a * 2 + ch) * k.frames + t);
        const float carried = k.audio_scale == 1.0 ? v : (bf ? round_bf16(v * carry) : v * carry);
        r.in.audio_rows.push_back(carried);
      }
  r.in.text.assign(x.context.data<uint16_t>(), x.context.data<uint16_t>() + x.context.numel());
  return r;
}

class LatentForward : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(LatentForward, EqualsRunForwardOnTheRestatedTensors) {
  const ModelWeights& w = weights_for(GetParam());
  const ModelConfig& c = w.config;
  HostMemory mem;
  for (const Case& k : {Case{}, Case{DType::f32, DType::f32, 3, 4, 3, 2, 1, 0, 0.25f, 4.0},
                        Case{DType::bf16, DType::f32, 1, 2, 2, 5, 7, 1, 1.0f, 1.0},
                        Case{DType::bf16, DType::bf16, 2, 3, 5, 4, 3, 2, 0.0f, 4.0, 0.9}}) {
    SCOPED_TRACE(::testing::Message()
                 << "t " << k.t << " h " << k.h << " w " << k.w << " cond " << k.cond_t << " sigma "
                 << k.sigma << " scale " << k.audio_scale);
    const Inputs x = make_inputs(c, k);
    Arena arena(mem, 0);
    auto be = make_cpu_backend(2);
    const LatentOutputs got = run_latent_forward(*be, arena, w, x.in, ExecOptions::stock());

    const Restated r = restate(c, k, x);
    ASSERT_EQ(r.layout.seq_len, got.report.tokens);
    Arena arena2(mem, 0);
    const ForwardOutputs ref = run_forward(*be, arena2, w, r.layout, r.in, ExecOptions::stock());
    // Video: unpatchify and crop, in the latent's dtype.
    ASSERT_EQ(got.video.shape, x.video.shape);
    ASSERT_EQ(got.video.dtype, k.video_dtype);
    const int64_t hp = k.h + k.h % 2, wp = k.w + k.w % 2, f = 4 * c.video_latent;
    int64_t bad = 0;
    for (int64_t t = 0; t < k.t; ++t)
      for (int64_t y = 0; y < k.h; ++y)
        for (int64_t xx = 0; xx < k.w; ++xx)
          for (int64_t ch = 0; ch < c.video_latent; ++ch) {
            const int64_t row = (t * (hp / 2) + y / 2) * (wp / 2) + xx / 2;
            const float v = ref.video[size_t(row * f + ch * 4 + (y % 2) * 2 + xx % 2)];
            const float want = k.video_dtype == DType::bf16 ? round_bf16(v) : v;
            bad += std::bit_cast<uint32_t>(want) !=
                   std::bit_cast<uint32_t>(at(got.video, ((ch * k.t + t) * k.h + y) * k.w + xx));
          }
    EXPECT_EQ(bad, 0) << "video values differ";
    // Audio: ComfyUI's forward undoes the carry around the network.
    const bool bf = k.audio_dtype == DType::bf16;
    auto rnd = [&](float v) { return bf ? round_bf16(v) : v; };
    const float coef = rnd(1.0f + float(k.audio_scale - 1.0) * r.sigma_a);
    bad = 0;
    for (int64_t a = 0; a < c.audio_latent; ++a)
      for (int64_t ch = 0; ch < 2; ++ch)
        for (int64_t t = 0; t < k.frames; ++t) {
          const size_t row = size_t(ch * k.frames + t);
          const float pred = rnd(ref.audio[row * size_t(c.audio_latent) + size_t(a)]);
          const float carried = r.in.audio_rows[row * size_t(c.audio_latent) + size_t(a)];
          const float want =
              k.audio_scale == 1.0
                  ? pred
                  : rnd(rnd(float(1.0 - k.audio_scale) * carried) + rnd(coef * pred));
          bad += std::bit_cast<uint32_t>(want) !=
                 std::bit_cast<uint32_t>(at(got.audio, (a * 2 + ch) * k.frames + t));
        }
    EXPECT_EQ(bad, 0) << "audio values differ";
  }
}

TEST_P(LatentForward, StreamedEqualsStockWithAwkwardChunks) {
  const ModelWeights& w = weights_for(GetParam());
  HostMemory mem;
  const Inputs x = make_inputs(w.config, Case{DType::bf16, DType::bf16, 3, 7, 5, 11, 13, 1});
  auto be = make_cpu_backend(2);
  Arena a1(mem, 0), a2(mem, 0);
  const LatentOutputs stock = run_latent_forward(*be, a1, w, x.in, ExecOptions::stock());
  ExecOptions o;
  o.q_chunk = 7;
  o.kv_chunk = 13;
  o.mlp_chunk = 1;
  o.min_tokens = 0;
  o.final_layer_chunk = 17;
  o.merge_tail_below = 0;
  const LatentOutputs streamed = run_latent_forward(*be, a2, w, x.in, o);
  EXPECT_EQ(streamed.report.streamed_blocks, w.config.blocks);
  EXPECT_EQ(stock.video.bytes, streamed.video.bytes);
  EXPECT_EQ(stock.audio.bytes, streamed.audio.bytes);
  // and the outputs depend on the inputs (a broken pipeline cannot pass by zeros)
  Inputs y = make_inputs(w.config, Case{DType::bf16, DType::bf16, 3, 7, 5, 11, 13, 1});
  y.in.sigma = 0.3f;
  Arena a3(mem, 0);
  EXPECT_NE(run_latent_forward(*be, a3, w, y.in, ExecOptions::stock()).audio.bytes,
            stock.audio.bytes);
}

INSTANTIATE_TEST_SUITE_P(Formats, LatentForward,
                         ::testing::Values(WeightFormat::bf16, WeightFormat::int8,
                                           WeightFormat::w4a8, WeightFormat::nvfp4),
                         [](const auto& p) { return std::string(format_name(p.param)); });

// Each bad operand: Error(invalid_argument) naming it, before any work.
TEST(LatentForwardErrors, BadOperandsNameTheOperandAndTheFix) {
  const ModelConfig& c = weights_for(WeightFormat::bf16).config;
  const Inputs good = make_inputs(c, Case{DType::bf16, DType::bf16, 2, 4, 4, 3, 4, 1});
  EXPECT_NO_THROW(prepare_latent_call(c, good.in));
  Array wrong_channels = random_array(DType::bf16, {1, c.video_latent + 1, 2, 4, 4}, 1);
  Array batch2 = random_array(DType::bf16, {2, c.video_latent, 2, 4, 4}, 1);
  Array rank4 = random_array(DType::bf16, {1, c.video_latent, 2, 4}, 1);
  Array f16 = random_array(DType::bf16, {1, c.video_latent, 2, 4, 4}, 1);
  f16.dtype = DType::f16;
  Array ctx_dim = random_array(DType::bf16, {1, 4, c.text_dim + 1}, 1);
  Array ctx_f32 = random_array(DType::f32, {1, 4, c.text_dim}, 1);
  Array audio_mono = random_array(DType::bf16, {1, c.audio_latent, 1, 3}, 1);
  Array cond_odd = random_array(DType::bf16, {1, c.video_latent, 1, 3, 4}, 1);
  struct Bad {
    const char* what;
    std::function<void(LatentInputs&)> change;
    std::vector<std::string> words;  // the message names these
  };
  const float nan = std::nanf("");
  const std::vector<Bad> bad = {
      {"channels",
       [&](LatentInputs& i) { i.video_latent = wrong_channels.ref(); },
       {"video_latent", "channels", std::to_string(c.video_latent)}},
      {"batch", [&](LatentInputs& i) { i.video_latent = batch2.ref(); }, {"video_latent", "batch"}},
      {"rank", [&](LatentInputs& i) { i.video_latent = rank4.ref(); }, {"video_latent", "rank 5"}},
      {"dtype",
       [&](LatentInputs& i) { i.video_latent = f16.ref(); },
       {"video_latent", "f16", "bf16 or f32"}},
      {"null", [&](LatentInputs& i) { i.video_latent.data = nullptr; }, {"video_latent", "null"}},
      {"cuda",
       [&](LatentInputs& i) { i.video_latent.device = Device::cuda; },
       {"video_latent", "host"}},
      {"text_dim",
       [&](LatentInputs& i) { i.context = ctx_dim.ref(); },
       {"context", std::to_string(c.text_dim)}},
      {"context dtype", [&](LatentInputs& i) { i.context = ctx_f32.ref(); }, {"context", "bf16"}},
      {"mono audio",
       [&](LatentInputs& i) { i.audio_latent = audio_mono.ref(); },
       {"audio_latent", "stereo"}},
      {"nan sigma", [&](LatentInputs& i) { i.sigma = nan; }, {"sigma", "finite"}},
      {"sigma > 1", [&](LatentInputs& i) { i.sigma = 1.5f; }, {"sigma", "[0, 1]"}},
      {"audio_scale", [&](LatentInputs& i) { i.audio_scale = 0.0; }, {"audio_scale", "> 0"}},
      {"aug", [&](LatentInputs& i) { i.visual_cond_noise_aug = 2.0; }, {"visual_cond_noise_aug"}},
      {"tags",
       [&](LatentInputs& i) {
         i.text_token_tags = {1, 1};
       },
       {"text_token_tags", "4"}},
      {"cond shape",
       [&](LatentInputs& i) { i.cond_latent = cond_odd.ref(); },
       {"cond_latent", "padded to even"}},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    LatentInputs in = good.in;
    b.change(in);
    try {
      prepare_latent_call(c, in);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      for (const std::string& word : b.words)
        EXPECT_NE(std::string(e.what()).find(word), std::string::npos)
            << "'" << word << "' not in: " << e.what();
    }
  }
}

}  // namespace
}  // namespace h3s::test
