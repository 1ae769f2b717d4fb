// Time embedding and curve-table lerp.
#include "exec/time_embed.hpp"

#include <algorithm>
#include <cmath>

namespace h3s {

OwnedTensor adaln_input(Backend& be, Arena& arena, const ModelWeights& w,
                        const std::vector<float>& timesteps) {
  const ModelConfig& c = w.config;
  const int64_t nt = int64_t(timesteps.size());
  if (c.time_form == TimeForm::curve) {
    // t in [0, 1] -> fractional table row; the last interval keeps t = 1 in range.
    const int64_t g = c.curve_grid, k = c.time_dim;
    std::vector<float> emb(size_t(nt * k));
    for (int64_t i = 0; i < nt; ++i) {
      const float pos = std::clamp(timesteps[size_t(i)], 0.0f, 1.0f) * float(g - 1);
      const int64_t i0 = std::min<int64_t>(int64_t(std::floor(pos)), g - 2);
      const float frac = pos - float(i0);
      for (int64_t j = 0; j < k; ++j) {
        const float a = w.adaln_t_table[size_t(i0 * k + j)];
        const float b = w.adaln_t_table[size_t((i0 + 1) * k + j)];
        // torch.lerp's two-sided form (exact at both ends).
        emb[size_t(i * k + j)] = frac < 0.5f ? a + frac * (b - a) : b - (b - a) * (1.0f - frac);
      }
    }
    OwnedTensor t = arena.tensor(DType::f32, {nt, k}, "curve t_emb");
    be.upload(emb.data(), t.view);
    return t;
  }
  // Sinusoid, cos first: freqs_j = exp(-ln(1e4) * j / half), fp32.
  const int64_t half = c.time_freq_dim / 2;
  std::vector<float> sin_cos(size_t(nt * c.time_freq_dim));
  const float neg_log = float(-std::log(10000.0));
  for (int64_t i = 0; i < nt; ++i)
    for (int64_t j = 0; j < half; ++j) {
      const float freq = float(std::exp(double((neg_log * float(j)) / float(half))));
      const float arg = timesteps[size_t(i)] * freq;
      sin_cos[size_t(i * c.time_freq_dim + j)] = float(std::cos(double(arg)));
      sin_cos[size_t(i * c.time_freq_dim + half + j)] = float(std::sin(double(arg)));
    }
  OwnedTensor in = arena.tensor(DType::f32, {nt, c.time_freq_dim}, "time sinusoid");
  be.upload(sin_cos.data(), in.view);
  OwnedTensor hid = arena.tensor(DType::f32, {nt, c.time_hidden}, "time embedder hidden");
  be.linear(in.view, w.time_in, hid.view);
  be.silu(hid.view, hid.view);
  OwnedTensor emb = arena.tensor(DType::f32, {nt, c.time_dim}, "t_emb fp32");
  be.linear(hid.view, w.time_out, emb.view);
  OwnedTensor out = arena.tensor(DType::bf16, {nt, c.time_dim}, "adaln input");
  be.convert(emb.view, out.view);  // t_emb.to(bf16)
  be.silu(out.view, out.view);     // SiLU in bf16 before the adaLN linear
  return out;
}

// Projection of the adaLN input through `lin` as bf16 [T, out] (the curve
// form projects in fp32 and rounds, like `.to(h.dtype)` in ComfyUI).
OwnedTensor adaln_project(Backend& be, Arena& arena, const QuantLinear& lin, const Tensor& adaln_in,
                          const char* what) {
  const int64_t t = adaln_in.rows();
  OwnedTensor out = arena.tensor(DType::bf16, {t, lin.out}, what);
  if (lin.format == WeightFormat::f32) {
    OwnedTensor f = arena.tensor(DType::f32, {t, lin.out}, what);
    be.linear(adaln_in, lin, f.view);
    be.convert(f.view, out.view);
  } else {
    be.linear(adaln_in, lin, out.view);
  }
  return out;
}

}  // namespace h3s
