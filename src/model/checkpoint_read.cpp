// Reading ComfyUI-format H3 checkpoints: detection, per-layer format
// dispatch, validation of every name, dtype, shape and scale.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_keys.hpp"

namespace h3s {

namespace {

constexpr std::string_view kComfyPrefix = "model.diffusion_model.";
// Largest dimension detect_config accepts from a shape (real models are far
// below): keeps the config arithmetic (18 x hidden, 3 x head_dim, 2 x packed
// columns, ...) inside int64 for hostile shapes such as [2^60, 0].
constexpr int64_t kMaxDim = int64_t(1) << 31;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Tensors a valid file may carry that h3stream does not use. ComfyUI's
// per-layer attention config (".attn.comfy_attention.config", a JSON blob
// as uint8: e.g. int8 attention) names ComfyUI's kernel; h3stream runs its
// own attention and K/V tiers.
bool ignorable(std::string_view name) {
  return ends_with(name, ".attn.to_gate_compress.weight") || ends_with(name, ".input_scale") ||
         ends_with(name, ".pre_quant_scale") || ends_with(name, ".attn.comfy_attention.config");
}

class Reader {
 public:
  Reader(const SafetensorsFile& f, std::string prefix, std::shared_ptr<const void> keep_alive = {})
      : f_(f), prefix_(std::move(prefix)), keep_alive_(std::move(keep_alive)) {
    const auto& md = f.metadata();
    if (auto it = md.find("_quantization_metadata"); it != md.end()) {
      try {
        header_quant_ = nlohmann::json::parse(it->second);
      } catch (const nlohmann::json::exception& e) {
        bad("_quantization_metadata is not JSON ({})", e.what());
      }
      if (!header_quant_->is_object() || !header_quant_->contains("layers") ||
          !(*header_quant_)["layers"].is_object())
        bad("_quantization_metadata must be an object with a \"layers\" object");
      any_quantised_ = !(*header_quant_)["layers"].empty();
    }
    for (const std::string& name : f.names())
      if (ends_with(name, ".comfy_quant")) any_quantised_ = true;
  }

  // ComfyUI loads a file with any quantised layer through its mixed-precision
  // ops, whose Linear holds every unquantised weight and bias in the compute
  // dtype (bf16), fp32 islands included, and upcasts them at run time
  // (H3_MODEL.md section 2). Such a file's islands are rounded to bf16 here.
  bool islands_held_bf16() const { return any_quantised_; }

  template <typename... A>
  [[noreturn]] void bad(fmt::format_string<A...> f, A&&... a) const {
    fail(ErrorKind::bad_input, "{}: {}", f_.path(), fmt::format(f, std::forward<A>(a)...));
  }

  bool has(const std::string& name) const { return f_.contains(prefix_ + name); }

  const TensorEntry& get(const std::string& name) {
    const std::string key = prefix_ + name;
    if (!f_.contains(key)) bad("missing tensor '{}'", key);
    used_.insert(key);
    return f_.entry(key);
  }

  void expect_dtype(const TensorEntry& e, std::initializer_list<std::string_view> ok) const {
    for (std::string_view d : ok)
      if (e.dtype == d) return;
    bad("tensor '{}' has dtype {}, expected {}", e.name, e.dtype, fmt::join(ok, " or "));
  }

  void expect_shape(const TensorEntry& e, const std::vector<int64_t>& shape) const {
    if (e.shape != shape)
      bad("tensor '{}' has shape [{}], expected [{}]", e.name, fmt::join(e.shape, ", "),
          fmt::join(shape, ", "));
  }

  // The entry's bytes on the host: its own, or (device entries) a copy read
  // through the file's DeviceReader, valid until the Reader goes.
  std::span<const std::byte> host(const TensorEntry& e) {
    if (e.device == Device::host) return {e.data, e.bytes};
    scratch_.emplace_back();
    return f_.host_bytes(e, scratch_.back());
  }

  // The entry as an array of T: a view into the file's memory when the
  // loader may keep it (keep_alive) and T can be read there (device memory,
  // or host data aligned for T), otherwise a host copy.
  template <class T>
  WeightArray<T> array(const TensorEntry& e, CheckpointSummary* summary) {
    const bool aligned = reinterpret_cast<uintptr_t>(e.data) % alignof(T) == 0;
    if (keep_alive_ && (e.device != Device::host || aligned)) {
      if (summary) summary->viewed_bytes += e.bytes;
      return WeightArray<T>::view({reinterpret_cast<const T*>(e.data), e.bytes / sizeof(T)},
                                  keep_alive_, e.device);
    }
    if (e.device != Device::host && !keep_alive_)
      bad("tensor '{}' is in device memory: load it with LoadOptions::keep_alive", e.name);
    if (summary) summary->copied_bytes += e.bytes;
    const std::span<const std::byte> b = host(e);
    std::vector<T> out(e.bytes / sizeof(T));
    if (e.bytes) std::memcpy(out.data(), b.data(), e.bytes);
    return WeightArray<T>(std::move(out));
  }

  // Element values of a BF16 / F16 / F32 tensor.
  std::vector<float> floats(const TensorEntry& e) {
    expect_dtype(e, {"BF16", "F16", "F32"});
    const std::span<const std::byte> data = host(e);
    const size_t n = e.bytes / e.elem_size;
    std::vector<float> out(n);
    if (e.dtype == "F32") {
      if (n) std::memcpy(out.data(), data.data(), 4 * n);
      return out;
    }
    const bool is_bf16 = e.dtype == "BF16";  // decided once, not per element
    for (size_t i = 0; i < n; ++i) {
      uint16_t b;
      std::memcpy(&b, data.data() + 2 * i, 2);
      out[i] = is_bf16 ? bf16_to_f32(bf16{b}) : f16_to_f32(b);
    }
    return out;
  }

  std::vector<float> finite_floats(const TensorEntry& e, bool positive) {
    std::vector<float> v = floats(e);
    for (size_t i = 0; i < v.size(); ++i)
      if (!std::isfinite(v[i]) || (positive && !(v[i] > 0.0f)))
        bad("tensor '{}' element {} is {}, expected a finite{} scale", e.name, i, v[i],
            positive ? " positive" : "");
    return v;
  }

  // e4m3 scale bytes must not be NaN (0x7f / 0xff). Per-group scales of a host
  // framework's device arrays are not read: at 1/16 of the weight (24 MB for a
  // full-size W4A8 block) the device -> host copy per call would cost more than the
  // rest of the hand-over; the framework's own loader made them from a file.
  static constexpr size_t kDeviceScanLimit = size_t(1) << 20;
  void expect_no_e4m3_nan(const TensorEntry& e) {
    if (e.device != Device::host && e.bytes > kDeviceScanLimit) return;
    const std::span<const std::byte> b = host(e);
    for (size_t i = 0; i < b.size(); ++i)
      if ((uint8_t(b[i]) & 0x7f) == 0x7f)
        bad("tensor '{}' element {} is NaN, expected a finite scale", e.name, i);
  }

  std::optional<LayerQuant> quant(const std::string& layer) {
    if (has(layer + ".comfy_quant")) {
      const TensorEntry& e = get(layer + ".comfy_quant");
      expect_dtype(e, {"U8", "I8"});
      if (e.shape.size() != 1) bad("tensor '{}' must be 1-D JSON bytes", e.name);
      const std::span<const std::byte> json = host(e);
      return parse_comfy_quant(
          std::string_view(reinterpret_cast<const char*>(json.data()), e.bytes),
          fmt::format("{}: tensor '{}'", f_.path(), e.name));
    }
    if (header_quant_) {
      const nlohmann::json& layers = (*header_quant_)["layers"];
      for (const std::string& k : {prefix_ + layer, layer})
        if (auto it = layers.find(k); it != layers.end())
          return parse_comfy_quant(it->dump(), fmt::format("{}: _quantization_metadata layer '{}'",
                                                           f_.path(), prefix_ + layer));
    }
    return std::nullopt;
  }

  // The logical [out, in] of a linear's weight as stored (before validation
  // against the config): packed formats hold two values per byte.
  std::pair<int64_t, int64_t> logical_shape(const std::string& layer) {
    const std::optional<LayerQuant> q = quant(layer);
    const TensorEntry& e = f_.entry(prefix_ + layer + ".weight");
    if (e.shape.size() != 2) bad("tensor '{}' must be 2-D, has rank {}", e.name, e.shape.size());
    if (e.shape[0] > kMaxDim || e.shape[1] > kMaxDim)
      bad("tensor '{}' has shape [{}], above the 2^31 limit per dimension", e.name,
          fmt::join(e.shape, ", "));
    const bool packed = q && (q->format == WeightFormat::w4a8 || q->format == WeightFormat::nvfp4);
    return {e.shape[0], packed ? 2 * e.shape[1] : e.shape[1]};
  }

  const SafetensorsFile& file() const { return f_; }
  const std::set<std::string>& used() const { return used_; }
  const std::string& prefix() const { return prefix_; }

 private:
  const SafetensorsFile& f_;
  std::string prefix_;
  std::shared_ptr<const void> keep_alive_;
  std::optional<nlohmann::json> header_quant_;
  bool any_quantised_ = false;
  std::set<std::string> used_;
  std::deque<std::vector<std::byte>> scratch_;  // host copies of device entries
};

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

// Scales and codebooks as fp32 arrays: views of F32 data, otherwise converted copies.
WeightArray<float> f32_array(Reader& r, const TensorEntry& e, std::vector<float> values,
                             CheckpointSummary* summary) {
  if (e.dtype == "F32") return r.array<float>(e, summary);
  if (summary) summary->copied_bytes += e.bytes;
  return WeightArray<float>(std::move(values));
}

// A ConvRot layer flagged full_precision_matrix_mult: ComfyUI dequantises
// it and multiplies in bf16, with no activation quantiser; so does h3stream,
// from the bf16 weight made once here.
void full_precision(Reader& r, const LinearSlot& s, QuantLinear& q, CheckpointSummary* summary) {
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

void load_linear(Reader& r, const LinearSlot& s, CheckpointSummary* summary) {
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
  Reader r(f, prefix);
  auto shape = [&](const std::string& name) -> const std::vector<int64_t>& {
    if (!r.has(name)) r.bad("missing tensor '{}'", prefix + name);
    return f.entry(prefix + name).shape;
  };
  auto dim = [&](const std::string& name, size_t i) {
    const std::vector<int64_t>& s = shape(name);
    if (s.size() <= i)
      r.bad("tensor '{}' has rank {}, expected at least {}", prefix + name, s.size(), i + 1);
    if (s[i] > kMaxDim)
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

namespace {

// "blocks.<n>." at the start of an unprefixed key (not "token_refiner.blocks.").
bool is_dit_block_key(std::string_view key) {
  constexpr std::string_view kStem = "blocks.";
  if (key.substr(0, kStem.size()) != kStem) return false;
  size_t end = kStem.size();
  while (end < key.size() && std::isdigit(static_cast<unsigned char>(key[end]))) ++end;
  return end > kStem.size() && end < key.size() && key[end] == '.';
}

// Reads the slots the filter keeps into their weights.
template <class Keep>
void load_slots(Reader& r, const WeightSlots& slots, CheckpointSummary* summary, Keep&& keep) {
  for (const LinearSlot& s : slots.linears)
    if (keep(s.name)) load_linear(r, s, summary);
  for (const VectorSlot& s : slots.norms) {
    if (!keep(s.name)) continue;
    const TensorEntry& e = r.get(s.name);
    r.expect_shape(e, {s.size});
    const std::vector<float> v = r.floats(e);  // also checks the dtype
    if (e.dtype == "BF16") {
      *s.v = r.array<uint16_t>(e, summary);
      continue;
    }
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]).bits;
    *s.v = std::move(b);
  }
  for (const F32Slot& s : slots.buffers) {
    if (!keep(s.name)) continue;
    const TensorEntry& e = r.get(s.name);
    r.expect_shape(e, s.shape);
    *s.v = r.floats(e);
    for (size_t i = 0; i < s.v->size(); ++i)
      if (!std::isfinite((*s.v)[i])) r.bad("tensor '{}' element {} is not finite", e.name, i);
  }
}

}  // namespace

bool is_dit_block_data(std::string_view name) {
  constexpr std::string_view kStem = "blocks.", kRefiner = "token_refiner.";
  if (ends_with(name, ".comfy_quant")) return false;
  for (size_t at = name.find(kStem); at != std::string_view::npos; at = name.find(kStem, at + 1)) {
    const bool boundary = at == 0 || name[at - 1] == '.';
    const bool refiner =
        at >= kRefiner.size() && name.substr(at - kRefiner.size(), kRefiner.size()) == kRefiner;
    size_t end = at + kStem.size();
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    if (boundary && !refiner && end > at + kStem.size() && end < name.size() && name[end] == '.')
      return true;
  }
  return false;
}

ModelWeights load_checkpoint(const SafetensorsFile& f, CheckpointSummary* summary,
                             const LoadOptions& options) {
  std::string prefix;
  ModelWeights w;
  w.config = detect_config(f, &prefix);
  w.refiner.resize(size_t(w.config.refiner_blocks));
  w.blocks.resize(size_t(w.config.blocks));
  Reader r(f, prefix, options.keep_alive);
  if (summary) {
    *summary = CheckpointSummary{};
    summary->prefix = prefix;
  }
  const auto skipped = [&](std::string_view key) {
    return options.skip_dit_blocks && is_dit_block_key(key);
  };
  load_slots(r, weight_slots(w), summary, [&](const std::string& name) { return !skipped(name); });
  for (const std::string& name : f.names()) {
    if (r.used().count(name) || ignorable(name)) continue;
    if (name.compare(0, prefix.size(), prefix) == 0 &&
        skipped(std::string_view(name).substr(prefix.size())))
      continue;
    r.bad("unexpected tensor '{}' (not part of an H3 model with {} blocks and {} refiner blocks)",
          name, w.config.blocks, w.config.refiner_blocks);
  }
  w.format = WeightFormat::bf16;
  if (!w.blocks.empty() && !options.skip_dit_blocks) w.format = w.blocks[0].attn.qkv.format;
  if (options.skip_dit_blocks && w.config.blocks > 0)
    if (const std::optional<LayerQuant> q = r.quant("blocks.0.attn.qkv_proj")) w.format = q->format;
  if (summary)
    for (const std::string& name : f.names()) {
      const TensorEntry& e = f.entry(name);
      summary->bytes_by_dtype[e.dtype] += e.bytes;
      summary->tensor_bytes += e.bytes;
    }
  return w;
}

BlockWeights load_dit_block(const SafetensorsFile& f, const ModelConfig& cfg, int64_t index,
                            std::shared_ptr<const void> keep_alive) {
  if (index < 0 || index >= cfg.blocks)
    fail(ErrorKind::invalid_argument, "block index {} is out of range: the model has {} blocks",
         index, cfg.blocks);
  const std::string stem = fmt::format("blocks.{}.", index);
  // The keys' common prefix: whatever stands before "blocks.<index>." in the
  // first key that has it ("", "model.diffusion_model.", ...).
  std::string prefix;
  bool found = false;
  for (const std::string& name : f.names())
    if (const size_t at = name.find(stem);
        at != std::string::npos && (at == 0 || name[at - 1] == '.')) {
      prefix = name.substr(0, at);
      found = true;
      break;
    }
  if (!found)
    fail(ErrorKind::bad_input, "{}: no tensor of block {} (expected keys '{}...')", f.path(), index,
         stem);
  ModelWeights w;
  w.config = cfg;
  w.blocks.resize(size_t(cfg.blocks));
  w.refiner.resize(size_t(cfg.refiner_blocks));
  Reader r(f, prefix, std::move(keep_alive));
  load_slots(r, weight_slots(w), nullptr,
             [&](const std::string& name) { return name.compare(0, stem.size(), stem) == 0; });
  for (const std::string& name : f.names())
    if (!r.used().count(name) && !ignorable(name))
      r.bad("unexpected tensor '{}' (not part of DiT block {})", name, index);
  return std::move(w.blocks[size_t(index)]);
}

ModelWeights load_checkpoint(const std::string& path, CheckpointSummary* summary) {
  auto f = std::make_shared<const SafetensorsFile>(SafetensorsFile::open(path));
  LoadOptions o;
  o.keep_alive = f;
  return load_checkpoint(*f, summary, o);
}

}  // namespace h3s
