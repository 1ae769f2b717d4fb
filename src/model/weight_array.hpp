// WeightArray<T>: one weight array as a read-only view (ggml's buffer model: a
// weight is a view into memory someone owns, never a cache entry).
//
// The memory is kept alive by a shared owner: a vector the array took over, a
// mapped checkpoint file, a backend's WeightStore, or a host framework's
// tensor (the Python module's borrowed arrays). Copying a WeightArray copies
// the view and shares the owner, so a QuantLinear is cheap to copy. The device
// says where the bytes are: a host loop may index only Device::host arrays.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.hpp"

namespace h3s {

// A fresh weight generation id: every array set a loader, builder or backend
// makes gets a new one, so a holder of a prepared copy can tell that its
// source was replaced (a reloaded block never runs on stale device weights).
inline uint64_t new_weight_generation() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

template <class T>
class WeightArray {
 public:
  WeightArray() = default;
  // Takes the vector over (implicit, so `linear.bias = std::move(values)` reads naturally).
  WeightArray(std::vector<T> values) {  // NOLINT(google-explicit-constructor)
    auto owned = std::make_shared<const std::vector<T>>(std::move(values));
    span_ = std::span<const T>(owned->data(), owned->size());
    owner_ = std::move(owned);
  }
  // A view of memory `owner` keeps alive (null: the caller guarantees it).
  static WeightArray view(std::span<const T> values, std::shared_ptr<const void> owner,
                          Device device = Device::host) {
    WeightArray a;
    a.span_ = values;
    a.owner_ = std::move(owner);
    a.device_ = device;
    return a;
  }

  const T* data() const { return span_.data(); }
  size_t size() const { return span_.size(); }
  size_t bytes() const { return span_.size() * sizeof(T); }
  bool empty() const { return span_.empty(); }
  Device device() const { return device_; }
  std::span<const T> span() const { return span_; }
  const std::shared_ptr<const void>& owner() const { return owner_; }
  // Host arrays only.
  const T& operator[](size_t i) const { return span_[i]; }
  auto begin() const { return span_.begin(); }
  auto end() const { return span_.end(); }
  // A copy of a host array's values.
  std::vector<T> to_vector() const { return std::vector<T>(span_.begin(), span_.end()); }

 private:
  std::span<const T> span_;
  std::shared_ptr<const void> owner_;
  Device device_ = Device::host;
};

}  // namespace h3s
