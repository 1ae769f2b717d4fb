// Writing ComfyUI-format H3 checkpoints (test fixtures, `h3s make-checkpoint`).
#include <cmath>
#include <cstring>
#include <deque>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_keys.hpp"

namespace h3s {

namespace {

class Writer {
 public:
  // Host arrays only (a device-prepared model is not written).
  template <typename T>
  void add(std::string name, std::string dtype, std::vector<int64_t> shape,
           const WeightArray<T>& v) {
    if (v.device() != Device::host)
      fail(ErrorKind::invalid_argument, "write_checkpoint: '{}' is in device memory", name);
    add_bytes(std::move(name), std::move(dtype), std::move(shape),
              {reinterpret_cast<const std::byte*>(v.data()), v.bytes()});
  }
  template <typename T>
  void add(std::string name, std::string dtype, std::vector<int64_t> shape,
           const std::vector<T>& v) {
    add_bytes(std::move(name), std::move(dtype), std::move(shape),
              {reinterpret_cast<const std::byte*>(v.data()), v.size() * sizeof(T)});
  }
  // Keeps a copy alive until write().
  template <typename T>
  void add_owned(std::string name, std::string dtype, std::vector<int64_t> shape,
                 std::vector<T> v) {
    std::vector<std::byte>& b = owned_.emplace_back(v.size() * sizeof(T));
    if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
    add_bytes(std::move(name), std::move(dtype), std::move(shape), b);
  }
  void add_bytes(std::string name, std::string dtype, std::vector<int64_t> shape,
                 std::span<const std::byte> bytes) {
    entries_.push_back({std::move(name), std::move(dtype), std::move(shape), bytes});
  }
  void write(const std::string& path, const std::map<std::string, std::string>& md) const {
    write_safetensors(path, entries_, md);
  }

 private:
  std::vector<WriteEntry> entries_;
  std::deque<std::vector<std::byte>> owned_;
};

bool bf16_exact(const WeightArray<float>& v) {
  for (float x : v)
    if (round_bf16(x) != x && !std::isnan(x)) return false;
  return true;
}

std::vector<uint16_t> to_bf16(const WeightArray<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_to_bf16(v[i]).bits;
  return out;
}

void write_linear(Writer& wr, const LinearSlot& s) {
  const QuantLinear& q = *s.q;
  if (q.out != s.out || q.in != s.in)
    fail(ErrorKind::invalid_argument, "write_checkpoint: layer '{}' is [{}, {}], expected [{}, {}]",
         s.name, q.out, q.in, s.out, s.in);
  const std::string w = s.name + ".weight";
  switch (q.format) {
    case WeightFormat::f32:
      wr.add(w, "F32", {q.out, q.in}, q.w_f32);
      break;
    case WeightFormat::bf16:
      wr.add(w, "BF16", {q.out, q.in}, q.w_bf16);
      break;
    case WeightFormat::int8:
      wr.add(w, "I8", {q.out, q.in}, q.w_i8);
      wr.add(s.name + ".weight_scale", "F32", {q.out, 1}, q.w_scale);
      break;
    case WeightFormat::w4a8:
      wr.add(w, "I8", {q.out, q.in / 2}, q.w4_codes);
      wr.add(s.name + ".weight_s_rel", "F8_E4M3", {q.out, q.in / kW4Group}, q.w4_s_rel);
      wr.add(s.name + ".weight_s_channel", "F32", {q.out}, q.w_scale);
      if (!q.w4_codebook.empty()) wr.add(s.name + ".weight_codebook", "F32", {16}, q.w4_codebook);
      break;
    case WeightFormat::nvfp4: {
      const int64_t np = round_up(q.out, 16), kp = round_up(q.in, 16);
      wr.add(w, "U8", {np, kp / 2}, q.fp4_codes);
      wr.add(s.name + ".weight_scale", "F8_E4M3", {round_up(np, 128), round_up(kp / 16, 4)},
             q.fp4_scales);
      wr.add_owned(s.name + ".weight_scale_2", "F32", {}, std::vector<float>{q.fp4_global});
      break;
    }
  }
  if (q.format == WeightFormat::int8 || q.format == WeightFormat::w4a8 ||
      q.format == WeightFormat::nvfp4) {
    const std::string json = comfy_quant_json(q.format);
    wr.add_owned(s.name + ".comfy_quant", "U8", {int64_t(json.size())},
                 std::vector<char>(json.begin(), json.end()));
  }
  if (s.bias) {
    if (int64_t(q.bias.size()) != q.out)
      fail(ErrorKind::invalid_argument, "write_checkpoint: layer '{}' needs a bias of {} values",
           s.name, q.out);
    // Biases of bf16 layers are stored bf16 like ComfyUI's files (exact here).
    if (s.role != LinearRole::island && bf16_exact(q.bias))
      wr.add_owned(s.name + ".bias", "BF16", {q.out}, to_bf16(q.bias));
    else
      wr.add(s.name + ".bias", "F32", {q.out}, q.bias);
  }
}

}  // namespace

void write_checkpoint(const ModelWeights& weights, const std::string& path,
                      const std::map<std::string, std::string>& metadata) {
  ModelWeights& w = const_cast<ModelWeights&>(weights);  // slots only read here
  const WeightSlots slots = weight_slots(w);
  Writer wr;
  for (const LinearSlot& s : slots.linears) write_linear(wr, s);
  for (const VectorSlot& s : slots.norms) {
    if (int64_t(s.v->size()) != s.size)
      fail(ErrorKind::invalid_argument, "write_checkpoint: '{}' has {} values, expected {}", s.name,
           s.v->size(), s.size);
    wr.add(s.name, "BF16", {s.size}, *s.v);
  }
  for (const F32Slot& s : slots.buffers) wr.add(s.name, "F32", s.shape, *s.v);
  std::map<std::string, std::string> md = metadata;
  md.emplace("format", "pt");
  wr.write(path, md);
}

}  // namespace h3s
