// Arena: every byte of engine (activation) memory comes from here, against a
// byte budget, and a ledger records usage per (block, phase).
//
// The arena does not pick addresses itself: a MemoryResource (host heap now,
// the CUDA device later) provides them; the arena enforces the budget and does
// the accounting, so the CPU and GPU ledgers mean the same thing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace h3s {

class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* p, size_t bytes) = 0;
  virtual Device device() const = 0;
};

// Host heap, 64-byte aligned (a cache line; AVX-512 loads).
class HostMemory final : public MemoryResource {
 public:
  void* allocate(size_t bytes) override;
  void deallocate(void* p, size_t bytes) override;
  Device device() const override { return Device::host; }
};

enum class Phase : uint8_t { setup, embed, refiner, kv, attn, mlp, final };
std::string_view phase_name(Phase p);

struct LedgerEntry {
  int block = -1;  // -1 outside the DiT blocks
  Phase phase = Phase::setup;
  size_t allocated_at_start = 0;  // bytes live when the phase began
  size_t peak = 0;                // highest live bytes during the phase
  size_t allocated_at_end = 0;    // bytes live when the next phase began (or now)
};

class Arena;

// Move-only ownership of one arena allocation.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer() { reset(); }

  void reset();
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return data_ != nullptr; }

 private:
  friend class Arena;
  Arena* arena_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A buffer with a tensor view over it.
struct OwnedTensor {
  Buffer buffer;
  Tensor view;
  explicit operator bool() const { return bool(buffer); }
  void reset() {
    buffer.reset();
    view = Tensor{};
  }
};

class Arena {
 public:
  // budget_bytes = 0 means unlimited.
  Arena(MemoryResource& memory, size_t budget_bytes);
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena();

  // Throws Error(out_of_memory) naming `what`, the request and the budget.
  Buffer allocate(size_t bytes, std::string_view what);
  OwnedTensor tensor(DType dtype, std::initializer_list<int64_t> shape, std::string_view what);

  size_t allocated() const { return allocated_; }
  size_t peak() const { return peak_; }  // since construction or reset_peak()
  size_t budget() const { return budget_; }
  // A new budget (0: unlimited) for later allocations; bytes already held stay.
  void set_budget(size_t bytes) { budget_ = bytes; }
  Device device() const { return memory_.device(); }
  void reset_peak() { peak_ = allocated_; }

  // Close the current ledger entry and open one for (block, phase).
  void mark(int block, Phase phase);
  // The ledger so far; the last entry is still open (its end is "now").
  std::vector<LedgerEntry> ledger() const;
  void clear_ledger();

 private:
  friend class Buffer;
  void release(void* p, size_t bytes);

  MemoryResource& memory_;
  size_t budget_;
  size_t allocated_ = 0;
  size_t peak_ = 0;
  std::vector<LedgerEntry> ledger_;
};

std::string format_bytes(size_t bytes);

}  // namespace h3s
