// load_linear (see checkpoint_linear.hpp).
#include "model/checkpoint_linear.hpp"

#include <cmath>

#include "model/quant_linear.hpp"

namespace h3s {

namespace {

// Scales and codebooks as fp32 arrays: views of F32 data, otherwise converted copies.
WeightArray<float> f32_array(CheckpointReader& r, const TensorEntry& e, std::vector<float> values,
                             CheckpointSummary* summary) {
  if (e.dtype == "F32") return r.array<float>(e, summary);
  if (summary) summary->copied_bytes += e.bytes;
  return WeightArray<float>(std::move(values));
}

// A ConvRot layer flagged full_precision_matrix_mult: ComfyUI dequantises
// it and multiplies in bf16, with no activation quantiser; so does h3stream,
// from the bf16 weight made once here.
void full_precision(CheckpointReader& r, const LinearSlot& s, QuantLinear& q,
                    CheckpointSummary* summary) {
  const bool host = q.w_scale.device() == Device::host &&
                    (q.format == WeightFormat::int8 ? q.w_i8.device() == Device::host
                                                    : q.w4_codes.device() == Device::host &&
                                                          q.w4_s_rel.device() == Device::host &&
                                                          q.w4_codebook.device() == Device::host);
  if (!host)
    r.bad(
        "layer '{}' is {} flagged full_precision_matrix_mult, in device memory: h3stream "
        "dequantises such a layer on the host; hand it the layer's bf16 weight instead (ComfyUI: "
        "weight.dequantize(), as its own forward does)",
        r.prefix() + s.name, format_name(q.format));
  QuantLinear dense;
  dense.format = WeightFormat::bf16;
  dense.out = q.out;
  dense.in = q.in;
  dense.generation = q.generation;
  dense.w_bf16 = dequantise_convrot_bf16(q);
  dense.bias = std::move(q.bias);
  if (summary) summary->copied_bytes += dense.w_bf16.size() * sizeof(uint16_t);
  q = std::move(dense);
}

}  // namespace

void load_linear(CheckpointReader& r, const LinearSlot& s, CheckpointSummary* summary) {
  QuantLinear& q = *s.q;
  q = QuantLinear{};
  q.out = s.out;
  q.in = s.in;
  q.generation = new_weight_generation();
  size_t bytes = 0;
  auto take = [&](const std::string& name) -> const TensorEntry& {
    const TensorEntry& e = r.get(name);
    bytes += e.bytes;
    return e;
  };
  const std::optional<LayerQuant> lq = r.quant(s.name);
  if (lq && r.has(s.name + ".comfy_quant"))
    bytes += r.file().entry(r.prefix() + s.name + ".comfy_quant").bytes;
  const TensorEntry& w = take(s.name + ".weight");
  // Parameters ComfyUI holds in bf16: every plain layer's, and the fp32
  // islands' too in a file with quantised layers.
  const bool held_bf16 = r.islands_held_bf16() && s.role == LinearRole::island;
  if (!lq && w.dtype == "BF16" && s.role != LinearRole::island) {
    // bf16 stays bf16: the bits as stored, viewed in place where possible.
    r.expect_shape(w, {s.out, s.in});
    q.format = WeightFormat::bf16;
    q.w_bf16 = r.array<uint16_t>(w, summary);
  } else if (!lq && w.dtype == "F32" && s.role == LinearRole::island && !held_bf16) {
    r.expect_shape(w, {s.out, s.in});
    q.format = WeightFormat::f32;
    q.w_f32 = r.array<float>(w, summary);
  } else if (!lq) {
    r.expect_shape(w, {s.out, s.in});
    std::vector<float> v = r.floats(w);
    if (summary) summary->copied_bytes += w.bytes;
    if (s.role == LinearRole::island) {
      q.format = WeightFormat::f32;
      if (held_bf16)
        for (float& x : v) x = round_bf16(x);
      q.w_f32 = std::move(v);
    } else {
      q.format = WeightFormat::bf16;
      std::vector<uint16_t> b(v.size());
      for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]).bits;
      q.w_bf16 = std::move(b);
    }
  } else {
    if (s.role == LinearRole::island)
      r.bad("layer '{}' is an fp32 island but is stored as {}", r.prefix() + s.name,
            format_name(lq->format));
    q.format = lq->format;
    if (lq->format == WeightFormat::int8) {
      r.expect_dtype(w, {"I8"});
      r.expect_shape(w, {s.out, s.in});
      if (s.in % kConvRotGroup != 0)
        r.bad("layer '{}': int8 ConvRot needs in_features divisible by 256, got {}",
              r.prefix() + s.name, s.in);
      q.w_i8 = r.array<int8_t>(w, summary);
      const TensorEntry& sc = take(s.name + ".weight_scale");
      r.expect_dtype(sc, {"F32", "BF16", "F16"});
      std::vector<float> v = r.finite_floats(sc, true);
      if (v.size() == 1 && (sc.shape.empty() || sc.shape == std::vector<int64_t>{1})) {
        q.w_scale = std::vector<float>(size_t(s.out), v[0]);  // one scale for the tensor
      } else {
        if (sc.shape != std::vector<int64_t>{s.out, 1} && sc.shape != std::vector<int64_t>{s.out})
          r.expect_shape(sc, {s.out, 1});
        q.w_scale = f32_array(r, sc, std::move(v), summary);
      }
    } else if (lq->format == WeightFormat::w4a8) {
      // Kept packed: the CUDA kernel decodes in the kernel, the CPU backend's
      // prepare decodes to int8 once.
      r.expect_dtype(w, {"I8", "U8"});
      r.expect_shape(w, {s.out, s.in / 2});
      if (s.in % kConvRotGroup != 0)
        r.bad("layer '{}': W4A8 needs in_features divisible by 256, got {}", r.prefix() + s.name,
              s.in);
      if (r.has(s.name + ".weight_correction"))
        r.bad("layer '{}': asymmetric W4A8 (weight_correction) is not supported",
              r.prefix() + s.name);
      q.w4_codes = r.array<uint8_t>(w, summary);
      const TensorEntry& rel = take(s.name + ".weight_s_rel");
      r.expect_dtype(rel, {"F8_E4M3", "U8"});
      r.expect_shape(rel, {s.out, s.in / kW4Group});
      r.expect_no_e4m3_nan(rel);
      q.w4_s_rel = r.array<uint8_t>(rel, summary);
      const TensorEntry& ch = take(s.name + ".weight_s_channel");
      r.expect_shape(ch, {s.out});
      q.w_scale = f32_array(r, ch, r.finite_floats(ch, true), summary);
      if (r.has(s.name + ".weight_codebook")) {
        const TensorEntry& cb = take(s.name + ".weight_codebook");
        r.expect_shape(cb, {16});
        q.w4_codebook = f32_array(r, cb, r.finite_floats(cb, false), summary);
      }
    } else {  // nvfp4: kept packed; Backend::prepare decodes it to the bf16 its GEMM reads
      const int64_t np = round_up(s.out, 16), kp = round_up(s.in, 16);
      r.expect_dtype(w, {"U8"});
      r.expect_shape(w, {np, kp / 2});
      q.fp4_codes = r.array<uint8_t>(w, summary);
      const TensorEntry& sc = take(s.name + ".weight_scale");
      r.expect_dtype(sc, {"F8_E4M3", "U8"});
      r.expect_shape(sc, {round_up(np, 128), round_up(kp / 16, 4)});
      r.expect_no_e4m3_nan(sc);
      q.fp4_scales = r.array<uint8_t>(sc, summary);
      const TensorEntry& g = take(s.name + ".weight_scale_2");
      if (!(g.shape.empty() || g.shape == std::vector<int64_t>{1})) r.expect_shape(g, {});
      q.fp4_global = r.finite_floats(g, true)[0];
    }
    // nvfp4 multiplies as bf16 whatever the flag says (Hopper and the CPU have
    // no fp4 GEMM: ComfyUI takes the same path there).
    if (lq->full_precision && q.format != WeightFormat::nvfp4) full_precision(r, s, q, summary);
  }
  if (s.bias) {
    const TensorEntry& b = take(s.name + ".bias");
    r.expect_shape(b, {s.out});
    std::vector<float> v = r.floats(b);
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i])) r.bad("tensor '{}' element {} is not finite", b.name, i);
    // A bf16 layer's bias is a bf16 parameter in ComfyUI, whatever the file holds.
    const bool bias_bf16 = held_bf16 || s.role != LinearRole::island;
    if (bias_bf16 && b.dtype != "BF16") {
      for (float& x : v) x = round_bf16(x);
      if (summary) summary->copied_bytes += b.bytes;
      q.bias = std::move(v);
    } else {
      q.bias = f32_array(r, b, std::move(v), summary);
    }
  }
  if (summary)
    summary->linears.push_back({r.prefix() + s.name, lq ? lq->format : q.format, bytes, held_bf16,
                                lq && lq->full_precision});
}

}  // namespace h3s
