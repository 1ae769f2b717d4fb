// WeightStore: memory a backend holds prepared weights in (docs/DESIGN.md
// "Weights: the backend owns them"), with a byte count the residency planner budgets.
//
// A store is filled by Backend::prepare() (possibly on a prefetch thread: it
// touches only the store), sealed once a unit (a block) is complete, and may
// be reset and refilled with the next unit after Backend::release() told it
// that the ops reading its weights were issued. The views prepare() returned
// into a store are valid until its next reset() or its destruction.
#pragma once

#include <cstddef>
#include <string>

#include "core/error.hpp"
#include "core/tensor.hpp"

namespace h3s {

// How a weight reaches a backend's kernels.
enum class Residency : uint8_t {
  resident,  // prepared once for the backend's lifetime (the CPU views host memory in place)
  streamed,  // prepared per use into a reused store (a copy, also on the CPU: its device pool)
  borrowed,  // used in place when it already is on the backend's device in its kernel form
};
std::string_view residency_name(Residency r);

class WeightStore {
 public:
  // capacity 0: unbounded (grows by allocations); otherwise one slab of that
  // many bytes, and a prepare() that would overflow it throws out_of_memory.
  WeightStore(std::string name, size_t capacity, Device device)
      : name_(std::move(name)), capacity_(capacity), device_(device) {}
  virtual ~WeightStore() = default;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;

  const std::string& name() const { return name_; }
  Device device() const { return device_; }
  size_t capacity() const { return capacity_; }
  size_t bytes() const { return used_; }    // held now
  size_t peak() const { return peak_; }     // most held at once
  int64_t units() const { return units_; }  // seal() calls so far

  // Forget every prepared weight (their views become invalid); a slab's
  // memory is kept for the next unit.
  virtual void reset() { used_ = 0; }
  // Every prepare() of the current unit has been issued.
  virtual void seal() { ++units_; }

  // Every allocation starts on this boundary (cp.async and vector loads).
  static constexpr size_t kAlign = 256;
  static size_t aligned(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 protected:
  // Accounts `bytes` (aligned) and returns the offset in a slab, or throws
  // Error(out_of_memory) naming the store, the request and the capacity.
  size_t take(size_t bytes) {
    const size_t need = aligned(bytes), at = used_;
    if (capacity_ != 0 && at + need > capacity_)
      fail(ErrorKind::out_of_memory,
           "weight store '{}': {} more bytes do not fit in its {} bytes ({} in use); raise the "
           "device budget (--vram-budget) or let the planner stream weights",
           name_, need, capacity_, at);
    used_ += need;
    if (used_ > peak_) peak_ = used_;
    return at;
  }

 private:
  std::string name_;
  size_t capacity_ = 0;
  Device device_ = Device::host;
  size_t used_ = 0, peak_ = 0;
  int64_t units_ = 0;
};

}  // namespace h3s
