// Packed layout construction, mirroring ComfyUI's PackedLayout and the
// timestep/mod-row logic of MiniMaxH3Model._forward (t2va / fl2va subset).
#include "model/packed_layout.hpp"

#include <algorithm>
#include <cmath>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace h3s {

namespace {

constexpr double kFrameRescale = 5.0 / 3.0;
constexpr int kFramePerToken[5] = {1, 4, 4, 4, 4};

// linspace((1 - ratio) / 2, (1 + ratio) / 2, dim / 2, endpoint=False) * 32
std::vector<double> axis_from_sqrt_area(int64_t dim, double sqrt_area) {
  const double ratio = double(dim) / sqrt_area;
  const int64_t n = dim / 2;
  std::vector<double> a(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    a[size_t(i)] = (double(i) * (ratio / double(n)) + (1.0 - ratio) / 2.0) * 32.0;
  return a;
}

void push(std::vector<double>& pos, double t, double h, double w) {
  pos.push_back(t);
  pos.push_back(h);
  pos.push_back(w);
}

}  // namespace

std::string_view segment_name(SegmentKind k) {
  switch (k) {
    case SegmentKind::text:
      return "text";
    case SegmentKind::cond:
      return "cond";
    case SegmentKind::audio:
      return "audio";
    case SegmentKind::video:
      return "video";
  }
  return "?";
}

float audio_sigma(float sigma_v, double shift_v, double shift_a) {
  const float fv = float(shift_v), fa = float(shift_a);
  const float base = sigma_v / (fv + sigma_v * (1.0f - fv));
  return fa * base / (1.0f + (fa - 1.0f) * base);
}

PackedLayout PackedLayout::build(const LayoutSpec& spec, const ModelConfig& cfg) {
  (void)cfg;
  auto need = [](bool ok, const char* what, int64_t v, const char* rule) {
    if (!ok) fail(ErrorKind::invalid_argument, "layout: {} = {} {}", what, v, rule);
  };
  need(spec.text_len >= 0, "text_len", spec.text_len, "must be >= 0");
  need(spec.latent_t >= 1, "latent_t", spec.latent_t, "must be >= 1");
  need(spec.latent_h >= 2 && spec.latent_h % 2 == 0, "latent_h", spec.latent_h,
       "must be even and >= 2 (2x2 patches)");
  need(spec.latent_w >= 2 && spec.latent_w % 2 == 0, "latent_w", spec.latent_w,
       "must be even and >= 2 (2x2 patches)");
  need(spec.audio_t >= 0, "audio_t", spec.audio_t, "must be >= 0");
  if (spec.cond_first_frame)
    need(spec.cond_latent_t >= 1, "cond_latent_t", spec.cond_latent_t, "must be >= 1");
  if (!(spec.visual_cond_aug >= 0.0 && spec.visual_cond_aug <= 1.0))
    fail(ErrorKind::invalid_argument, "layout: visual_cond_aug = {} must be in [0, 1]",
         spec.visual_cond_aug);
  if (!spec.text_tags.empty()) {
    need(int64_t(spec.text_tags.size()) == spec.text_len, "text_tags length",
         int64_t(spec.text_tags.size()), "must equal text_len");
    for (uint8_t t : spec.text_tags)
      need(t <= kTagAudio, "text tag", t, "must be 0 (video), 1 (text) or 2 (audio)");
  }
  if (!(spec.sigma > 0.0f && spec.sigma <= 1.0f))
    fail(ErrorKind::invalid_argument, "layout: sigma = {} must be in (0, 1]", spec.sigma);

  PackedLayout L;
  L.text_len = spec.text_len;
  L.latent_t = spec.latent_t;
  L.latent_h = spec.latent_h;
  L.latent_w = spec.latent_w;
  L.audio_t = spec.audio_t;

  const double area = std::sqrt(double(spec.latent_h) * double(spec.latent_w));
  const std::vector<double> hs = axis_from_sqrt_area(spec.latent_h, area);
  const std::vector<double> ws = axis_from_sqrt_area(spec.latent_w, area);
  const int64_t frame_rows = int64_t(hs.size() * ws.size());

  std::vector<double>& pos = L.positions;
  int64_t row = 0;
  auto add_segment = [&](SegmentKind k, int64_t n) {
    L.segments.push_back({k, row, row + n});
    row += n;
  };

  for (int64_t i = 0; i < spec.text_len; ++i) push(pos, double(i), 0.0, 0.0);
  add_segment(SegmentKind::text, spec.text_len);

  // Latent frames from `origin`: t = origin + the exclusive cumsum of the
  // frames' spans, summed in that order as torch.cumsum does (_video_t_grid).
  auto video_grid = [&](int64_t frames, double origin) {
    double span_sum = 0.0;
    for (int64_t f = 0; f < frames; ++f) {
      const double t = origin + span_sum;
      for (double h : hs)
        for (double w : ws) push(pos, t, h, w);
      span_sum += kFrameRescale * kFramePerToken[f % 5];
    }
  };

  const double origin = double(spec.text_len);  // no reference blocks
  if (spec.cond_first_frame) {
    video_grid(spec.cond_latent_t, origin);
    add_segment(SegmentKind::cond, spec.cond_latent_t * frame_rows);
  }

  // Audio: channel-major stereo, t advances per latent step, w pinned to the
  // grid extremes per channel, h = 0.
  for (int ch = 0; ch < 2; ++ch)
    for (int64_t t = 0; t < spec.audio_t; ++t)
      push(pos, origin + double(t), 0.0, ch == 0 ? ws.front() : ws.back());
  add_segment(SegmentKind::audio, 2 * spec.audio_t);

  video_grid(spec.latent_t, origin);
  add_segment(SegmentKind::video, spec.latent_t * frame_rows);
  L.seq_len = row;
  L.video = L.segments.back();
  L.audio = L.segments[L.segments.size() - 2];

  // Timesteps, in fp32 like the model's tensor arithmetic.
  const float sigma_v = std::max(spec.sigma, 1e-6f);
  L.sigma = sigma_v;
  const float t_v = 1.0f - sigma_v;
  const float t_a = 1.0f - audio_sigma(sigma_v, cfg.sigma_shift_video, cfg.sigma_shift_audio);
  const float t_cond = float(std::max(double(t_v), spec.visual_cond_aug));
  std::vector<float> ts = {t_v, t_a};
  if (spec.cond_first_frame) ts.push_back(t_cond);
  std::sort(ts.begin(), ts.end());
  ts.erase(std::unique(ts.begin(), ts.end()), ts.end());
  L.timesteps = ts;
  auto t_row = [&](float t) { return int32_t(std::find(ts.begin(), ts.end(), t) - ts.begin()); };
  L.video_t_row = t_row(t_v);
  L.audio_t_row = t_row(t_a);

  for (const Segment& s : L.segments) {
    if (s.size() == 0) continue;
    if (s.kind == SegmentKind::text) {
      const int32_t base = t_row(t_v) * 3;
      if (spec.text_tags.empty()) {
        L.mod_runs.push_back({s.begin, s.end, base + kTagText});
        continue;
      }
      // The presentation text span mixes tags: split it into tag runs.
      int64_t start = 0;
      for (int64_t i = 1; i <= s.size(); ++i) {
        if (i == s.size() || spec.text_tags[size_t(i)] != spec.text_tags[size_t(start)]) {
          L.mod_runs.push_back(
              {s.begin + start, s.begin + i, base + int32_t(spec.text_tags[size_t(start)])});
          start = i;
        }
      }
    } else if (s.kind == SegmentKind::cond) {
      L.mod_runs.push_back({s.begin, s.end, t_row(t_cond) * 3 + kTagVideo});
    } else if (s.kind == SegmentKind::audio) {
      L.mod_runs.push_back({s.begin, s.end, t_row(t_a) * 3 + kTagAudio});
    } else {
      L.mod_runs.push_back({s.begin, s.end, t_row(t_v) * 3 + kTagVideo});
    }
  }
  return L;
}

std::vector<ModRun> PackedLayout::runs_in(RowRange r) const {
  std::vector<ModRun> out;
  for (const ModRun& m : mod_runs) {
    const int64_t a = std::max(m.begin, r.begin), b = std::min(m.end, r.end);
    if (a < b) out.push_back({a - r.begin, b - r.begin, m.mod_row});
  }
  return out;
}

int64_t PackedLayout::rows_of(SegmentKind k) const {
  int64_t n = 0;
  for (const Segment& s : segments)
    if (s.kind == k) n += s.size();
  return n;
}

std::vector<float> default_inv_freq(int64_t n) {
  std::vector<float> f(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) f[size_t(i)] = float(std::pow(10000.0, -double(i) / double(n)));
  return f;
}

std::vector<uint16_t> rope_table(const PackedLayout& layout, std::span<const float> inv_freq,
                                 int64_t rope_dim) {
  const int64_t half = rope_dim / 2, nf = int64_t(inv_freq.size());
  H3S_CHECK(half == 3 * nf);
  std::vector<uint16_t> table(static_cast<size_t>(layout.seq_len * half * 2));
  for (int64_t s = 0; s < layout.seq_len; ++s) {
    for (int64_t i = 0; i < half; ++i) {
      const float p = float(layout.positions[size_t(s * 3 + i / nf)]);
      const float angle = p * inv_freq[size_t(i % nf)];
      // cos/sin of an fp32 angle, correctly rounded to fp32 via double.
      const float c = float(std::cos(double(angle))), sn = float(std::sin(double(angle)));
      table[size_t((s * half + i) * 2)] = f32_to_bf16(c).bits;
      table[size_t((s * half + i) * 2 + 1)] = f32_to_bf16(sn).bits;
    }
  }
  return table;
}

}  // namespace h3s
