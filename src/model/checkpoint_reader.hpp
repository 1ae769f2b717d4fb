// CheckpointReader: one checkpoint file seen through its key prefix, with the
// checks every loader step shares (names, dtypes, shapes, finite scales), the
// per-layer quantisation config, and arrays that view the file's memory where
// they may. Internal to src/model (the checkpoint_*.cpp files).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "model/checkpoint.hpp"

namespace h3s {

// Largest dimension the reader accepts from a shape (real models are far
// below): keeps the config arithmetic (18 x hidden, 3 x head_dim, 2 x packed
// columns, ...) inside int64 for hostile shapes such as [2^60, 0].
inline constexpr int64_t kMaxCheckpointDim = int64_t(1) << 31;

class CheckpointReader {
 public:
  CheckpointReader(const SafetensorsFile& f, std::string prefix,
                   std::shared_ptr<const void> keep_alive = {});

  // ComfyUI loads a file with any quantised layer through its mixed-precision
  // ops, whose Linear holds every unquantised weight and bias in the compute
  // dtype (bf16), fp32 islands included, and upcasts them at run time
  // (docs/H3_MODEL.md section 2). Such a file's islands are rounded to bf16 here.
  bool islands_held_bf16() const { return any_quantised_; }

  template <typename... A>
  [[noreturn]] void bad(fmt::format_string<A...> f, A&&... a) const {
    fail(ErrorKind::bad_input, "{}: {}", f_.path(), fmt::format(f, std::forward<A>(a)...));
  }

  bool has(const std::string& name) const { return f_.contains(prefix_ + name); }
  // The entry of prefix + name, marked used; bad input if it is missing.
  const TensorEntry& get(const std::string& name);

  void expect_dtype(const TensorEntry& e, std::initializer_list<std::string_view> ok) const;
  void expect_shape(const TensorEntry& e, const std::vector<int64_t>& shape) const;

  // The entry's bytes on the host: its own, or (device entries) a copy read
  // through the file's DeviceReader, valid until the reader goes.
  std::span<const std::byte> host(const TensorEntry& e);

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
  std::vector<float> floats(const TensorEntry& e);
  // floats(), each one finite (and > 0 if `positive`), or bad input naming it.
  std::vector<float> finite_floats(const TensorEntry& e, bool positive);
  // e4m3 scale bytes must not be NaN (0x7f / 0xff).
  void expect_no_e4m3_nan(const TensorEntry& e);

  // The layer's quantisation config: its `.comfy_quant` tensor, else its
  // entry in the header's `_quantization_metadata`, else none (unquantised).
  std::optional<LayerQuant> quant(const std::string& layer);
  // The logical [out, in] of a linear's weight as stored (before validation
  // against the config): packed formats hold two values per byte.
  std::pair<int64_t, int64_t> logical_shape(const std::string& layer);

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

}  // namespace h3s
