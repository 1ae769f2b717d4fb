// CheckpointReader (see checkpoint_reader.hpp).
#include "model/checkpoint_reader.hpp"

#include <fmt/ranges.h>

#include <cmath>

namespace h3s {

CheckpointReader::CheckpointReader(const SafetensorsFile& f, std::string prefix,
                                   std::shared_ptr<const void> keep_alive)
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
    if (name.ends_with(".comfy_quant")) any_quantised_ = true;
}

const TensorEntry& CheckpointReader::get(const std::string& name) {
  const std::string key = prefix_ + name;
  if (!f_.contains(key)) bad("missing tensor '{}'", key);
  used_.insert(key);
  return f_.entry(key);
}

void CheckpointReader::expect_dtype(const TensorEntry& e,
                                    std::initializer_list<std::string_view> ok) const {
  for (std::string_view d : ok)
    if (e.dtype == d) return;
  bad("tensor '{}' has dtype {}, expected {}", e.name, e.dtype, fmt::join(ok, " or "));
}

void CheckpointReader::expect_shape(const TensorEntry& e, const std::vector<int64_t>& shape) const {
  if (e.shape != shape)
    bad("tensor '{}' has shape [{}], expected [{}]", e.name, fmt::join(e.shape, ", "),
        fmt::join(shape, ", "));
}

std::span<const std::byte> CheckpointReader::host(const TensorEntry& e) {
  if (e.device == Device::host) return {e.data, e.bytes};
  scratch_.emplace_back();
  return f_.host_bytes(e, scratch_.back());
}

std::vector<float> CheckpointReader::floats(const TensorEntry& e) {
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

std::vector<float> CheckpointReader::finite_floats(const TensorEntry& e, bool positive) {
  std::vector<float> v = floats(e);
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]) || (positive && !(v[i] > 0.0f)))
      bad("tensor '{}' element {} is {}, expected a finite{} scale", e.name, i, v[i],
          positive ? " positive" : "");
  return v;
}

// Per-group scales of a host framework's device arrays are not read: at 1/16
// of the weight (24 MB for a full-size W4A8 block) the device -> host copy per
// call would cost more than the rest of the hand-over; the framework's own
// loader made them from a file.
constexpr size_t kDeviceScanLimit = size_t(1) << 20;

void CheckpointReader::expect_no_e4m3_nan(const TensorEntry& e) {
  if (e.device != Device::host && e.bytes > kDeviceScanLimit) return;
  const std::span<const std::byte> b = host(e);
  for (size_t i = 0; i < b.size(); ++i)
    if ((uint8_t(b[i]) & 0x7f) == 0x7f)
      bad("tensor '{}' element {} is NaN, expected a finite scale", e.name, i);
}

std::optional<LayerQuant> CheckpointReader::quant(const std::string& layer) {
  if (has(layer + ".comfy_quant")) {
    const TensorEntry& e = get(layer + ".comfy_quant");
    expect_dtype(e, {"U8", "I8"});
    if (e.shape.size() != 1) bad("tensor '{}' must be 1-D JSON bytes", e.name);
    const std::span<const std::byte> json = host(e);
    return parse_comfy_quant(std::string_view(reinterpret_cast<const char*>(json.data()), e.bytes),
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

std::pair<int64_t, int64_t> CheckpointReader::logical_shape(const std::string& layer) {
  const std::optional<LayerQuant> q = quant(layer);
  const TensorEntry& e = f_.entry(prefix_ + layer + ".weight");
  if (e.shape.size() != 2) bad("tensor '{}' must be 2-D, has rank {}", e.name, e.shape.size());
  if (e.shape[0] > kMaxCheckpointDim || e.shape[1] > kMaxCheckpointDim)
    bad("tensor '{}' has shape [{}], above the 2^31 limit per dimension", e.name,
        fmt::join(e.shape, ", "));
  const bool packed = q && (q->format == WeightFormat::w4a8 || q->format == WeightFormat::nvfp4);
  return {e.shape[0], packed ? 2 * e.shape[1] : e.shape[1]};
}

}  // namespace h3s
