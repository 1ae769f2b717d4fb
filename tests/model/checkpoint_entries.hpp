// A checkpoint's tensors as owned, editable copies: what the checkpoint tests
// read from a good file, change and write back (test_checkpoint.cpp,
// test_checkpoint_bad_input.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/safetensors.hpp"

namespace h3s::test {

struct Owned {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> data;
};

inline std::vector<Owned> read_entries(const SafetensorsFile& f) {
  std::vector<Owned> out;
  for (const std::string& n : f.names()) {
    const TensorEntry& e = f.entry(n);
    out.push_back({e.name, e.dtype, e.shape, std::vector<std::byte>(e.data, e.data + e.bytes)});
  }
  return out;
}

inline void write_entries(const std::string& path, const std::vector<Owned>& entries,
                          const std::map<std::string, std::string>& md) {
  std::vector<WriteEntry> w;
  for (const Owned& o : entries) w.push_back({o.name, o.dtype, o.shape, o.data});
  write_safetensors(path, w, md);
}

inline Owned& entry_named(std::vector<Owned>& v, const std::string& name) {
  for (Owned& o : v)
    if (o.name == name) return o;
  throw std::runtime_error("test fixture: no tensor " + name);
}

// The entry as a 1-D U8 tensor of `text` (a layer's .comfy_quant JSON).
inline void set_text(Owned& o, const std::string& text) {
  o.data.assign(reinterpret_cast<const std::byte*>(text.data()),
                reinterpret_cast<const std::byte*>(text.data()) + text.size());
  o.shape = {int64_t(text.size())};
}

template <class T>
std::vector<std::byte> as_bytes(const std::vector<T>& v) {
  std::vector<std::byte> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace h3s::test
