// Weight quantisation for the presets and the W4A8 decode.
#include "model/quant_linear.hpp"

#include <algorithm>
#include <cmath>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "model/convrot.hpp"

namespace h3s {

std::string_view format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::bf16:
      return "bf16";
    case WeightFormat::f32:
      return "f32";
    case WeightFormat::int8:
      return "int8";
    case WeightFormat::w4a8:
      return "w4a8";
    case WeightFormat::nvfp4:
      return "nvfp4";
  }
  return "?";
}

WeightFormat parse_format(std::string_view s) {
  if (s == "bf16") return WeightFormat::bf16;
  if (s == "int8") return WeightFormat::int8;
  if (s == "w4a8") return WeightFormat::w4a8;
  if (s == "nvfp4") return WeightFormat::nvfp4;
  if (s == "f32") return WeightFormat::f32;
  fail(ErrorKind::invalid_argument, "unknown weight format '{}': use bf16, int8, w4a8 or nvfp4", s);
}

size_t QuantLinear::weight_bytes() const {
  return w_bf16.bytes() + w_f32.bytes() + w_i8.bytes() + w_scale.bytes() + w4_codes.bytes() +
         w4_s_rel.bytes() + w4_codebook.bytes() + fp4_codes.bytes() + fp4_scales.bytes() +
         bias.bytes();
}

Device QuantLinear::device() const {
  switch (format) {
    case WeightFormat::bf16:
      return w_bf16.device();
    case WeightFormat::f32:
      return w_f32.device();
    case WeightFormat::int8:
      return w_i8.device();
    case WeightFormat::w4a8:
      return w4_codes.empty() ? w_i8.device() : w4_codes.device();
    case WeightFormat::nvfp4:
      return w_bf16.empty() ? fp4_codes.device() : w_bf16.device();
  }
  return Device::host;
}

void QuantLinear::check_complete(const char* op) const {
  const size_t nk = size_t(out * in);
  bool ok = false;
  switch (format) {
    case WeightFormat::bf16:
      ok = w_bf16.size() == nk;
      break;
    case WeightFormat::nvfp4: {  // packed, decoded (w_bf16), or both
      const int64_t np = round_up(out, 16), kp = round_up(in, 16);
      ok = w_bf16.size() == nk ||
           (int64_t(fp4_codes.size()) == np * kp / 2 &&
            int64_t(fp4_scales.size()) == round_up(np, 128) * round_up(kp / 16, 4));
      break;
    }
    case WeightFormat::f32:
      ok = w_f32.size() == nk;
      break;
    case WeightFormat::int8:
      ok = w_i8.size() == nk && w_scale.size() == size_t(out) && in % kConvRotGroup == 0;
      break;
    case WeightFormat::w4a8:  // packed, decoded (w_i8), or both
      ok = (w_i8.size() == nk || (w4_codes.size() == nk / 2 && w4_s_rel.size() == nk / kW4Group)) &&
           w_scale.size() == size_t(out) && in % kConvRotGroup == 0;
      break;
  }
  if (!ok)
    fail(ErrorKind::invalid_argument, "{}: {} weight [{}, {}] is incomplete", op,
         format_name(format), out, in);
  if (has_bias() && int64_t(bias.size()) != out)
    fail(ErrorKind::invalid_argument, "{}: bias has {} values, expected {}", op, bias.size(), out);
}

QuantLinear QuantLinear::from_f32(std::vector<float> w, int64_t out, int64_t in) {
  H3S_CHECK(int64_t(w.size()) == out * in);
  QuantLinear q;
  q.format = WeightFormat::f32;
  q.out = out;
  q.in = in;
  q.generation = new_weight_generation();
  q.w_f32 = std::move(w);
  return q;
}

namespace {

// NVFP4 from a bf16 master, comfy-kitchen's scheme (TensorCoreNVFP4Layout.quantize, as
// ComfyUI calls it): global = bf16(amax / (448 * 6)) (torch divides in the weight's dtype,
// so the global of a bf16 weight is a bf16 value), block scale =
// e4m3(min(amax_block / 6 / global, 448)), code = e2m1(w / (scale * global)). Bit-exact
// with comfy-kitchen 0.2.31 (tests/model/test_nvfp4_golden.cpp).
QuantLinear quantize_nvfp4(std::span<const uint16_t> w, int64_t out, int64_t in) {
  QuantLinear q;
  q.format = WeightFormat::nvfp4;
  q.out = out;
  q.in = in;
  q.generation = new_weight_generation();
  const int64_t np = round_up(out, 16), kp = round_up(in, 16);
  const int64_t blocks = kp / 16, scale_cols = round_up(blocks, 4);
  float amax = 0.0f;
  for (uint16_t v : w) amax = std::max(amax, std::fabs(bf16_to_f32(bf16{v})));
  q.fp4_global = amax > 0.0f ? round_bf16(amax / (448.0f * 6.0f)) : 1.0f;
  std::vector<uint8_t> codes(size_t(np * kp / 2), 0);
  std::vector<uint8_t> scales(size_t(round_up(np, 128) * scale_cols), 0);
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t b = 0; b < blocks; ++b) {
      float bmax = 0.0f;
      for (int64_t k = b * 16; k < std::min(in, b * 16 + 16); ++k)
        bmax = std::max(bmax, std::fabs(bf16_to_f32(bf16{w[size_t(n * in + k)]})));
      const uint8_t s8 = f32_to_e4m3(std::min(bmax / 6.0f / q.fp4_global, 448.0f));
      scales[size_t(nvfp4_scale_offset(n, b, scale_cols))] = s8;
      const float step = e4m3_to_f32(s8) * q.fp4_global;
      for (int64_t k = b * 16; k < std::min(in, b * 16 + 16); ++k) {
        const float v = bf16_to_f32(bf16{w[size_t(n * in + k)]});
        const uint8_t code = step > 0.0f ? f32_to_e2m1(v / step) : 0;
        uint8_t& byte = codes[size_t(n * (kp / 2) + k / 2)];
        byte = uint8_t(k % 2 == 0 ? (byte & 0x0f) | (code << 4) : (byte & 0xf0) | code);
      }
    }
  }
  q.fp4_codes = std::move(codes);
  q.fp4_scales = std::move(scales);
  decode_nvfp4(q);
  return q;
}

}  // namespace

int64_t nvfp4_scale_offset(int64_t r, int64_t c, int64_t cols) {
  return ((r / 128) * (cols / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

std::vector<uint16_t> decode_nvfp4_values(const QuantLinear& q) {
  H3S_CHECK(q.format == WeightFormat::nvfp4);
  H3S_CHECK(q.fp4_codes.device() == Device::host && q.fp4_scales.device() == Device::host);
  const int64_t np = round_up(q.out, 16), kp = round_up(q.in, 16);
  const int64_t scale_cols = round_up(kp / 16, 4);
  H3S_CHECK(int64_t(q.fp4_codes.size()) == np * kp / 2);
  H3S_CHECK(int64_t(q.fp4_scales.size()) == round_up(np, 128) * scale_cols);
  std::vector<uint16_t> w(size_t(q.out * q.in));
  for (int64_t n = 0; n < q.out; ++n)
    for (int64_t k = 0; k < q.in; ++k) {
      const uint8_t byte = q.fp4_codes[size_t(n * (kp / 2) + k / 2)];
      const uint8_t code = k % 2 == 0 ? uint8_t(byte >> 4) : uint8_t(byte & 0x0f);  // even: high
      const float s = e4m3_to_f32(q.fp4_scales[size_t(nvfp4_scale_offset(n, k / 16, scale_cols))]);
      // comfy-kitchen's order (CUDA kernel and fp32 eager path): decode_scale = scale *
      // global first, then value * decode_scale; differs from (value * global) * scale
      // when the global is not a bf16 value.
      w[size_t(n * q.in + k)] = f32_to_bf16(e2m1_to_f32(code) * (s * q.fp4_global)).bits;
    }
  return w;
}

void decode_nvfp4(QuantLinear& q) {
  q.w_bf16 = decode_nvfp4_values(q);
}

QuantLinear QuantLinear::from_bf16(std::span<const uint16_t> w, int64_t out, int64_t in,
                                   WeightFormat format) {
  H3S_CHECK(int64_t(w.size()) == out * in);
  QuantLinear q;
  q.format = format;
  q.out = out;
  q.in = in;
  q.generation = new_weight_generation();
  if (format == WeightFormat::bf16) {
    q.w_bf16 = std::vector<uint16_t>(w.begin(), w.end());
    return q;
  }
  if (format == WeightFormat::f32) {
    std::vector<float> f(w.size());
    for (size_t i = 0; i < w.size(); ++i) f[i] = bf16_to_f32(bf16{w[i]});
    q.w_f32 = std::move(f);
    return q;
  }
  if (format == WeightFormat::nvfp4) return quantize_nvfp4(w, out, in);
  if (in % kConvRotGroup != 0)
    fail(ErrorKind::invalid_argument,
         "{} weight needs in_features divisible by {} (ConvRot group), got {}", format_name(format),
         kConvRotGroup, in);
  std::vector<float> row(static_cast<size_t>(in));
  if (format == WeightFormat::int8) {
    // comfy-kitchen quantises int8 ConvRot weights with the activation quantiser.
    std::vector<int8_t> w8(size_t(out * in));
    std::vector<float> scale(static_cast<size_t>(out));
    for (int64_t n = 0; n < out; ++n) {
      for (int64_t k = 0; k < in; ++k) row[size_t(k)] = bf16_to_f32(bf16{w[size_t(n * in + k)]});
      quantize_row_convrot(row.data(), in, w8.data() + n * in, &scale[size_t(n)]);
    }
    q.w_i8 = std::move(w8);
    q.w_scale = std::move(scale);
    return q;
  }
  // w4a8: rotate, per-channel scale = absmax / 127, per-16 group e4m3 scale so
  // that levels -8..7 span the group, codes = level + 8.
  std::vector<uint8_t> codes(size_t(out * in / 2), 0);
  std::vector<uint8_t> s_rel(size_t(out * in / kW4Group));
  std::vector<float> s_channel_all(static_cast<size_t>(out));
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t k = 0; k < in; ++k) row[size_t(k)] = bf16_to_f32(bf16{w[size_t(n * in + k)]});
    for (int64_t g = 0; g < in; g += kConvRotGroup) convrot_rotate_group(row.data() + g);
    float amax = 0.0f;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    const float s_channel = std::max(amax / 127.0f, 1e-30f);
    s_channel_all[size_t(n)] = s_channel;
    for (int64_t g = 0; g < in / kW4Group; ++g) {
      float gmax = 0.0f;
      for (int64_t j = 0; j < kW4Group; ++j)
        gmax = std::max(gmax, std::fabs(row[size_t(g * kW4Group + j)]));
      const uint8_t s8 = f32_to_e4m3(gmax / s_channel / 7.0f);
      s_rel[size_t(n * (in / kW4Group) + g)] = s8;
      const float s = e4m3_to_f32(s8);
      for (int64_t j = 0; j < kW4Group; ++j) {
        const int64_t k = g * kW4Group + j;
        float level = s > 0.0f ? std::nearbyint(row[size_t(k)] / s_channel / s) : 0.0f;
        level = std::clamp(level, -8.0f, 7.0f);
        const uint8_t code = uint8_t(int(level) + 8);
        uint8_t& byte = codes[size_t(n * (in / 2) + k / 2)];
        byte = uint8_t(k % 2 == 0 ? (byte & 0xf0) | code : (byte & 0x0f) | (code << 4));
      }
    }
  }
  q.w4_codes = std::move(codes);
  q.w4_s_rel = std::move(s_rel);
  q.w_scale = std::move(s_channel_all);
  decode_w4a8(q);
  return q;
}

std::vector<int8_t> decode_w4a8_values(const QuantLinear& q) {
  H3S_CHECK(q.format == WeightFormat::w4a8);
  H3S_CHECK(q.w4_codes.device() == Device::host && q.w4_s_rel.device() == Device::host &&
            q.w4_codebook.device() == Device::host);
  const int64_t out = q.out, in = q.in;
  H3S_CHECK(int64_t(q.w4_codes.size()) == out * in / 2);
  H3S_CHECK(int64_t(q.w4_s_rel.size()) == out * in / kW4Group);
  std::vector<int8_t> w8(size_t(out * in));
  for (int64_t n = 0; n < out; ++n) {
    for (int64_t k = 0; k < in; ++k) {
      const uint8_t byte = q.w4_codes[size_t(n * (in / 2) + k / 2)];
      const int code = k % 2 == 0 ? (byte & 0x0f) : (byte >> 4);  // even column: low nibble
      const float level = q.w4_codebook.empty() ? float(code - 8) : q.w4_codebook[size_t(code)];
      const float s = e4m3_to_f32(q.w4_s_rel[size_t(n * (in / kW4Group) + k / kW4Group)]);
      w8[size_t(n * in + k)] = int8_t(std::clamp(std::nearbyint(level * s), -127.0f, 127.0f));
    }
  }
  return w8;
}

void decode_w4a8(QuantLinear& q) {
  q.w_i8 = decode_w4a8_values(q);
}

std::vector<uint16_t> dequantise_convrot_bf16(const QuantLinear& q) {
  H3S_CHECK(q.format == WeightFormat::int8 || q.format == WeightFormat::w4a8);
  H3S_CHECK(q.in % kConvRotGroup == 0 && int64_t(q.w_scale.size()) == q.out);
  H3S_CHECK(q.w_scale.device() == Device::host);
  std::vector<int8_t> decoded;
  std::span<const int8_t> w8;
  if (q.format == WeightFormat::w4a8) {
    decoded = decode_w4a8_values(q);
    w8 = decoded;
  } else {
    H3S_CHECK(q.w_i8.device() == Device::host && int64_t(q.w_i8.size()) == q.out * q.in);
    w8 = std::span<const int8_t>(q.w_i8.data(), q.w_i8.size());
  }
  std::vector<uint16_t> w(size_t(q.out * q.in));
  std::vector<float> group(static_cast<size_t>(kConvRotGroup));
  for (int64_t n = 0; n < q.out; ++n) {
    const float s = q.w_scale[size_t(n)];
    for (int64_t g = 0; g < q.in; g += kConvRotGroup) {
      const size_t at = size_t(n * q.in + g);
      for (int64_t i = 0; i < kConvRotGroup; ++i) {
        const float v = float(w8[at + size_t(i)]) * s;
        group[size_t(i)] = q.format == WeightFormat::w4a8 ? round_bf16(v) : v;
      }
      convrot_rotate_group(group.data());
      for (int64_t i = 0; i < kConvRotGroup; ++i)
        w[at + size_t(i)] = f32_to_bf16(group[size_t(i)]).bits;
    }
  }
  return w;
}

}  // namespace h3s
