// Arena accounting and the host memory resource.
#include "core/arena.hpp"

#include <cstdint>
#include <cstdlib>
#include <new>

namespace h3s {

void* HostMemory::allocate(size_t bytes) {
  constexpr size_t kAlign = 64;
  if (bytes > SIZE_MAX - (kAlign - 1)) throw std::bad_alloc();  // rounding would wrap
  const size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
  if (!p) throw std::bad_alloc();
  return p;
}

void HostMemory::deallocate(void* p, size_t) {
  std::free(p);
}

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::setup:
      return "setup";
    case Phase::embed:
      return "embed";
    case Phase::refiner:
      return "refiner";
    case Phase::kv:
      return "kv";
    case Phase::attn:
      return "attn";
    case Phase::mlp:
      return "mlp";
    case Phase::final:
      return "final";
  }
  return "?";
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    arena_ = o.arena_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    o.arena_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void Buffer::reset() {
  if (data_) arena_->release(data_, bytes_);
  arena_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

Arena::Arena(MemoryResource& memory, size_t budget_bytes) : memory_(memory), budget_(budget_bytes) {
  ledger_.push_back(LedgerEntry{});
}

Arena::~Arena() = default;

Buffer Arena::allocate(size_t bytes, std::string_view what) {
  // Written as a subtraction: allocated_ + bytes can wrap for huge requests.
  if (budget_ != 0 && (allocated_ > budget_ || bytes > budget_ - allocated_)) {
    fail(ErrorKind::out_of_memory,
         "memory budget {} cannot hold {} ({}): {} already in use; raise the budget or lower "
         "the chunk sizes",
         format_bytes(budget_), what, format_bytes(bytes), format_bytes(allocated_));
  }
  Buffer b;
  b.arena_ = this;
  b.data_ = memory_.allocate(bytes);
  b.bytes_ = bytes;
  allocated_ += bytes;
  if (allocated_ > peak_) peak_ = allocated_;
  LedgerEntry& cur = ledger_.back();
  if (allocated_ > cur.peak) cur.peak = allocated_;
  return b;
}

OwnedTensor Arena::tensor(DType dtype, std::initializer_list<int64_t> shape,
                          std::string_view what) {
  // Element count with overflow detection (a zero dimension makes it 0 regardless).
  size_t n = 1;
  bool overflow = false, empty = false;
  for (int64_t s : shape) {
    if (s < 0) fail(ErrorKind::invalid_argument, "negative dimension {} for {}", s, what);
    if (s == 0)
      empty = true;
    else if (n > SIZE_MAX / size_t(s))
      overflow = true;
    n *= size_t(s);
  }
  if (empty) {
    n = 0;
    overflow = false;
  }
  const size_t elem = dtype_size(dtype);
  if (overflow || n > size_t(INT64_MAX) || n > SIZE_MAX / elem)
    fail(ErrorKind::out_of_memory, "tensor {} is too large: its byte size overflows", what);
  OwnedTensor t;
  t.buffer = allocate(n * elem, what);
  t.view = Tensor::contiguous(t.buffer.data(), dtype, shape, memory_.device());
  return t;
}

void Arena::release(void* p, size_t bytes) {
  memory_.deallocate(p, bytes);
  allocated_ -= bytes;
}

void Arena::mark(int block, Phase phase) {
  ledger_.back().allocated_at_end = allocated_;
  LedgerEntry e;
  e.block = block;
  e.phase = phase;
  e.allocated_at_start = allocated_;
  e.peak = allocated_;
  ledger_.push_back(e);
}

std::vector<LedgerEntry> Arena::ledger() const {
  std::vector<LedgerEntry> out = ledger_;
  out.back().allocated_at_end = allocated_;
  return out;
}

void Arena::clear_ledger() {
  ledger_.clear();
  LedgerEntry e;
  e.allocated_at_start = allocated_;
  e.peak = allocated_;
  ledger_.push_back(e);
}

std::string format_bytes(size_t bytes) {
  const double b = double(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  if (b >= 1024.0) return fmt::format("{:.1f} KiB", b / 1024.0);
  return fmt::format("{} B", bytes);
}

}  // namespace h3s
