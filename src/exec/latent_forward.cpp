// run_latent_forward: ComfyUI's MiniMaxH3Model.forward around run_forward
// (comfy/ldm/minimax/model.py: forward, _forward, patchify_video, pack_audio,
// _cond_video_rows; comfy/ldm/common_dit.py: pad_to_patch_size). Every
// elementwise step rounds where torch's does: an op on bf16 tensors computes
// in fp32 and rounds its result to bf16 once.
#include "exec/latent_forward.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <cstring>
#include <initializer_list>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/torch_randn.hpp"

namespace h3s {

namespace {

constexpr int64_t kPatch = 2;  // the DiT's 1 x 2 x 2 video patch

std::string shape_text(const std::vector<int64_t>& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

// dtype, memory and data of one input.
void check_array(const ArrayRef& a, const char* name, std::initializer_list<DType> dtypes) {
  bool dtype_ok = false;
  std::string allowed;
  for (DType d : dtypes) {
    dtype_ok |= a.dtype == d;
    allowed += (allowed.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  if (!dtype_ok)
    fail(ErrorKind::invalid_argument, "{} has dtype {}, expected {}", name, dtype_name(a.dtype),
         allowed);
  for (int64_t d : a.shape)
    if (d < 0)
      fail(ErrorKind::invalid_argument, "{} has shape {} with a negative size", name,
           shape_text(a.shape));
  if (a.device != Device::host)
    fail(ErrorKind::invalid_argument,
         "{} is in CUDA memory: the forward reads its inputs from host memory (copy it to the "
         "host first)",
         name);
  if (a.data == nullptr && a.numel() > 0)
    fail(ErrorKind::invalid_argument, "{} has no data (a null pointer) for shape {}", name,
         shape_text(a.shape));
}

void check_rank(const ArrayRef& a, const char* name, size_t rank, const std::string& form) {
  if (a.shape.size() != rank)
    fail(ErrorKind::invalid_argument, "{} has shape {}, expected {} (rank {})", name,
         shape_text(a.shape), form, rank);
}

// Element i as fp32. memcpy: a caller's array (a safetensors entry) need not
// be aligned for its type.
float value_at(const ArrayRef& a, int64_t i) {
  const auto* p = static_cast<const std::byte*>(a.data);
  if (a.dtype == DType::bf16) {
    uint16_t b;
    std::memcpy(&b, p + i * 2, 2);
    return bf16_to_f32(bf16{b});
  }
  float f;
  std::memcpy(&f, p + i * 4, 4);
  return f;
}

// An fp32 result held in `t` (bf16 rounds, f32 keeps).
float in_dtype(DType t, float v) {
  return t == DType::bf16 ? round_bf16(v) : v;
}

void store(Array& out, int64_t i, float v) {
  if (out.dtype == DType::bf16)
    out.data<uint16_t>()[i] = f32_to_bf16(v).bits;
  else
    out.data<float>()[i] = v;
}

// [1, C, T, H, W] -> rows (t, h/2, w/2) x features (c, ph, pw), wrapping rows
// and columns past H and W to the start (circular padding to Hp x Wp).
void patchify(const ArrayRef& latent, int64_t hp, int64_t wp, std::vector<float>& rows) {
  const int64_t c = latent.shape[1], t = latent.shape[2], h = latent.shape[3], w = latent.shape[4];
  const int64_t hh = hp / kPatch, ww = wp / kPatch, features = c * kPatch * kPatch;
  const size_t first = rows.size();
  rows.resize(first + size_t(t * hh * ww * features));
  float* out = rows.data() + first;
  for (int64_t f = 0; f < t; ++f)
    for (int64_t y = 0; y < hh; ++y)
      for (int64_t x = 0; x < ww; ++x) {
        float* row = out + ((f * hh + y) * ww + x) * features;
        for (int64_t ch = 0; ch < c; ++ch)
          for (int64_t py = 0; py < kPatch; ++py)
            for (int64_t px = 0; px < kPatch; ++px) {
              const int64_t sy = (y * kPatch + py) % h, sx = (x * kPatch + px) % w;
              row[(ch * kPatch + py) * kPatch + px] =
                  value_at(latent, ((ch * t + f) * h + sy) * w + sx);
            }
      }
}

// The sampler's carried audio as the network sees it: audio * carry in the
// audio's dtype (carry = sigma_a / sigma_v in that dtype), or as given.
float carried_audio(const LatentInputs& in, const LatentCall& call, int64_t i) {
  const float a = value_at(in.audio_latent, i);
  if (in.audio_scale == 1.0) return a;
  const DType t = in.audio_latent.dtype;
  const float carry = in_dtype(t, call.sigma_a / call.sigma_v);
  return in_dtype(t, a * carry);
}

}  // namespace

LatentCall prepare_latent_call(const ModelConfig& cfg, const LatentInputs& in) {
  // Shapes, dtypes and values first: nothing runs on a bad call.
  const ArrayRef& v = in.video_latent;
  const ArrayRef& a = in.audio_latent;
  const ArrayRef& ctx = in.context;
  check_array(v, "video_latent", {DType::bf16, DType::f32});
  check_rank(v, "video_latent", 5, fmt::format("[1, {}, T, H, W]", cfg.video_latent));
  check_array(a, "audio_latent", {DType::bf16, DType::f32});
  check_rank(a, "audio_latent", 4, fmt::format("[1, {}, 2, frames]", cfg.audio_latent));
  check_array(ctx, "context", {DType::bf16});
  check_rank(ctx, "context", 3, fmt::format("[1, L, {}]", cfg.text_dim));
  for (const auto& [arr, name] :
       {std::pair{&v, "video_latent"}, std::pair{&a, "audio_latent"}, std::pair{&ctx, "context"}})
    if (arr->shape[0] != 1)
      fail(ErrorKind::invalid_argument,
           "{} has batch {} (shape {}): MiniMax-H3 runs batch size 1, one call per sample", name,
           arr->shape[0], shape_text(arr->shape));
  if (v.shape[1] != cfg.video_latent)
    fail(ErrorKind::invalid_argument,
         "video_latent has {} channels (shape {}), but the checkpoint's video latent has {}",
         v.shape[1], shape_text(v.shape), cfg.video_latent);
  if (v.shape[2] < 1 || v.shape[3] < 1 || v.shape[4] < 1)
    fail(ErrorKind::invalid_argument, "video_latent has shape {}: T, H and W must be >= 1",
         shape_text(v.shape));
  if (a.shape[1] != cfg.audio_latent || a.shape[2] != 2)
    fail(ErrorKind::invalid_argument,
         "audio_latent has shape {}, expected [1, {}, 2, frames] (the checkpoint's {} audio "
         "channels, stereo)",
         shape_text(a.shape), cfg.audio_latent, cfg.audio_latent);
  if (a.shape[3] < 1)
    fail(ErrorKind::invalid_argument, "audio_latent has shape {}: it needs at least one frame",
         shape_text(a.shape));
  if (ctx.shape[2] != cfg.text_dim)
    fail(ErrorKind::invalid_argument,
         "context has shape {}: its last dimension must be the checkpoint's text_dim {} (raw text "
         "encoder states; the refiner runs inside)",
         shape_text(ctx.shape), cfg.text_dim);
  if (ctx.shape[1] < 1)
    fail(ErrorKind::invalid_argument, "context has shape {}: it needs at least one text token",
         shape_text(ctx.shape));
  if (!std::isfinite(in.sigma) || in.sigma < 0.0f || in.sigma > 1.0f)
    fail(ErrorKind::invalid_argument,
         "sigma = {} is not valid: it must be a finite value in [0, 1] (the sampler's sigma of "
         "this step)",
         in.sigma);
  if (!std::isfinite(in.audio_scale) || !(in.audio_scale > 0.0))
    fail(ErrorKind::invalid_argument,
         "audio_scale = {} is not valid: it must be finite and > 0 (4 when sampling the packed "
         "latent, 1 for no audio carry)",
         in.audio_scale);
  if (!(in.visual_cond_noise_aug >= 0.0 && in.visual_cond_noise_aug <= 1.0))
    fail(ErrorKind::invalid_argument, "visual_cond_noise_aug = {} must be in [0, 1]",
         in.visual_cond_noise_aug);
  const int64_t text_len = ctx.shape[1];
  if (!in.text_token_tags.empty() && int64_t(in.text_token_tags.size()) != text_len)
    fail(ErrorKind::invalid_argument,
         "text_token_tags has {} tags, expected one per text token ({})", in.text_token_tags.size(),
         text_len);

  LatentCall call;
  const int64_t t = v.shape[2], h = v.shape[3], w = v.shape[4];
  call.padded_h = (h + kPatch - 1) / kPatch * kPatch;
  call.padded_w = (w + kPatch - 1) / kPatch * kPatch;
  if (in.cond_latent) {
    const ArrayRef& c = *in.cond_latent;
    check_array(c, "cond_latent", {DType::bf16, DType::f32});
    const std::string form =
        fmt::format("[1, {}, Tc, {}, {}]", cfg.video_latent, call.padded_h, call.padded_w);
    check_rank(c, "cond_latent", 5, form);
    if (c.shape[0] != 1 || c.shape[1] != cfg.video_latent || c.shape[2] < 1 ||
        c.shape[3] != call.padded_h || c.shape[4] != call.padded_w)
      fail(ErrorKind::invalid_argument,
           "cond_latent has shape {}, expected {}: the keyframe latent has the video latent's "
           "channels and its height and width padded to even",
           shape_text(c.shape), form);
  }

  // model_sampling hands the model timestep = sigma * 1000 (fp32), which the
  // model divides back and clamps.
  const float timestep = in.sigma * 1000.0f;
  call.sigma_v = std::max(timestep / 1000.0f, 1e-6f);
  call.sigma_a = audio_sigma(call.sigma_v, cfg.sigma_shift_video, cfg.sigma_shift_audio);

  LayoutSpec spec;
  spec.text_len = text_len;
  spec.latent_t = t;
  spec.latent_h = call.padded_h;
  spec.latent_w = call.padded_w;
  spec.audio_t = a.shape[3];
  spec.text_tags = in.text_token_tags;
  spec.sigma = call.sigma_v;
  spec.visual_cond_aug = in.visual_cond_noise_aug;
  if (in.cond_latent) {
    spec.cond_first_frame = true;
    spec.cond_latent_t = in.cond_latent->shape[2];
  }
  call.layout = PackedLayout::build(spec, cfg);

  // Video rows in segment order: the keyframe's cond rows, then the target's.
  ForwardInputs& fi = call.inputs;
  if (in.cond_latent) {
    patchify(*in.cond_latent, call.padded_h, call.padded_w, fi.video_rows);
    const double aug = in.visual_cond_noise_aug;
    if (aug < 1.0) {
      const std::vector<float> noise = torch_cpu_randn(in.seed, int64_t(fi.video_rows.size()));
      const float keep = float(aug), mix = float(1.0 - aug);
      for (size_t i = 0; i < fi.video_rows.size(); ++i)
        fi.video_rows[i] = keep * fi.video_rows[i] + mix * noise[i];
    }
  }
  patchify(v, call.padded_h, call.padded_w, fi.video_rows);

  // Audio rows channel-major: row ch * frames + t, column c.
  const int64_t ac = a.shape[1], frames = a.shape[3];
  fi.audio_rows.resize(size_t(2 * frames * ac));
  for (int64_t c = 0; c < ac; ++c)
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t f = 0; f < frames; ++f)
        fi.audio_rows[size_t((ch * frames + f) * ac + c)] =
            carried_audio(in, call, (c * 2 + ch) * frames + f);

  fi.text.resize(size_t(ctx.numel()));
  std::memcpy(fi.text.data(), ctx.data, ctx.bytes());
  return call;
}

LatentOutputs finish_latent_outputs(const LatentInputs& in, const LatentCall& call,
                                    const ForwardOutputs& out) {
  const ArrayRef& v = in.video_latent;
  const ArrayRef& a = in.audio_latent;
  LatentOutputs r;
  // Video: unpatchify, crop the padding, in the latent's dtype.
  const int64_t c = v.shape[1], t = v.shape[2], h = v.shape[3], w = v.shape[4];
  const int64_t ww = call.padded_w / kPatch, hh = call.padded_h / kPatch;
  const int64_t features = c * kPatch * kPatch;
  H3S_CHECK(int64_t(out.video.size()) == t * hh * ww * features);
  r.video = Array(v.dtype, v.shape);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t f = 0; f < t; ++f)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x) {
          const int64_t row = (f * hh + y / kPatch) * ww + x / kPatch;
          const int64_t col = (ch * kPatch + y % kPatch) * kPatch + x % kPatch;
          store(r.video, ((ch * t + f) * h + y) * w + x, out.video[size_t(row * features + col)]);
        }

  // Audio: [1, C, 2, frames] in the latent's dtype; with a carry, the
  // derivative of the carried variable as ComfyUI's forward returns it:
  // (1 - scale) * carried + bf16(1 + (scale - 1) * sigma_a) * prediction.
  const int64_t ac = a.shape[1], frames = a.shape[3];
  H3S_CHECK(int64_t(out.audio.size()) == 2 * frames * ac);
  const DType at = a.dtype;
  r.audio = Array(at, a.shape);
  const double scale = in.audio_scale;
  const float coef = in_dtype(at, 1.0f + float(scale - 1.0) * call.sigma_a);
  for (int64_t ch_c = 0; ch_c < ac; ++ch_c)
    for (int64_t ch = 0; ch < 2; ++ch)
      for (int64_t f = 0; f < frames; ++f) {
        const int64_t i = (ch_c * 2 + ch) * frames + f;
        const float pred = in_dtype(at, out.audio[size_t((ch * frames + f) * ac + ch_c)]);
        float y = pred;
        if (scale != 1.0) {
          const float carried = carried_audio(in, call, i);
          y = in_dtype(at, in_dtype(at, float(1.0 - scale) * carried) + in_dtype(at, coef * pred));
        }
        store(r.audio, i, y);
      }

  ForwardReport& rep = r.report;
  rep.tokens = call.layout.seq_len;
  rep.seconds = out.seconds;
  rep.arena_peak_bytes = out.peak_bytes;
  rep.weight_bytes = out.weight_bytes;
  rep.weights_plan = out.weights.describe();
  rep.placement = out.placement.describe();
  rep.kv_on_host = out.placement.kv_on_host;
  rep.staged_to_host_bytes = out.staging.to_host_bytes;
  rep.staged_to_device_bytes = out.staging.to_device_bytes;
  rep.weights_peak_bytes = out.weights_peak_bytes;
  rep.activation_estimate = out.activation_estimate;
  rep.stock_blocks = out.stock_blocks;
  rep.streamed_blocks = out.streamed_blocks;
  rep.log = out.log;
  return r;
}

LatentOutputs run_latent_forward(Backend& be, Arena& arena, const ModelWeights& weights,
                                 const LatentInputs& in, const ExecOptions& options,
                                 const ProgressFn& progress) {
  options.validate();
  const LatentCall call = prepare_latent_call(weights.config, in);
  const ForwardOutputs out =
      run_forward(be, arena, weights, call.layout, call.inputs, options, progress);
  return finish_latent_outputs(in, call, out);
}

}  // namespace h3s
