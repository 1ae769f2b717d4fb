// Writing ComfyUI-format H3 checkpoints (test fixtures, `h3s make-checkpoint`).
#include <cmath>
#include <cstring>
#include <deque>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_keys.hpp"
#include "model/checkpoint_tensors.hpp"

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
  if (s.bias && int64_t(q.bias.size()) != q.out)
    fail(ErrorKind::invalid_argument, "write_checkpoint: layer '{}' needs a bias of {} values",
         s.name, q.out);
  LinearStorage st;
  st.format = q.format;
  st.codebook = q.format == WeightFormat::w4a8 && !q.w4_codebook.empty();
  // Biases of bf16 layers are stored bf16 like ComfyUI's files (exact here).
  st.bias_bf16 = s.bias && s.role != LinearRole::island && bf16_exact(q.bias);
  for (LinearTensor& t : linear_tensors(s, st)) {
    switch (t.part) {
      case LinearPart::weight:
        if (q.format == WeightFormat::f32)
          wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.w_f32);
        else if (q.format == WeightFormat::bf16)
          wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.w_bf16);
        else if (q.format == WeightFormat::int8)
          wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.w_i8);
        else if (q.format == WeightFormat::w4a8)
          wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.w4_codes);
        else
          wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.fp4_codes);
        break;
      case LinearPart::scale:
      case LinearPart::s_channel:
        wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.w_scale);
        break;
      case LinearPart::s_rel:
        wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.w4_s_rel);
        break;
      case LinearPart::codebook:
        wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.w4_codebook);
        break;
      case LinearPart::block_scale:
        wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.fp4_scales);
        break;
      case LinearPart::global:
        wr.add_owned(std::move(t.name), std::move(t.dtype), std::move(t.shape),
                     std::vector<float>{q.fp4_global});
        break;
      case LinearPart::comfy_quant: {
        const std::string json = comfy_quant_json(q.format);
        wr.add_owned(std::move(t.name), std::move(t.dtype), std::move(t.shape),
                     std::vector<char>(json.begin(), json.end()));
        break;
      }
      case LinearPart::bias:
        if (st.bias_bf16)
          wr.add_owned(std::move(t.name), std::move(t.dtype), std::move(t.shape), to_bf16(q.bias));
        else
          wr.add(std::move(t.name), std::move(t.dtype), std::move(t.shape), q.bias);
        break;
    }
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
