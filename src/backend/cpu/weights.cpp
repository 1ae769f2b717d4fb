// The CPU backend's weights: host memory is its device memory, so a resident
// weight is the source itself (a mapped file is read in place, no second
// copy); only the int8 decode of W4A8 (the form its int8 GEMM reads) is made.
// A streamed weight is copied into the store, as a device backend would copy
// it into device memory: the CPU suite exercises every residency decision.
#include <cstring>

#include "backend/cpu/cpu_backend.hpp"
#include "core/arena.hpp"

namespace h3s::cpu {

namespace {

// Host memory for prepared weights: one 64-byte-aligned slab of `capacity`
// bytes, or (capacity 0) one allocation per array.
class CpuWeightStore final : public WeightStore {
 public:
  CpuWeightStore(std::string name, size_t capacity)
      : WeightStore(std::move(name), capacity, Device::host) {
    if (capacity != 0) slab_ = static_cast<std::byte*>(memory_.allocate(capacity));
  }
  ~CpuWeightStore() override {
    free_arrays();
    if (slab_) memory_.deallocate(slab_, capacity());
  }
  void reset() override {
    WeightStore::reset();
    free_arrays();
  }
  void* allocate(size_t bytes) {
    const size_t at = take(bytes);
    if (slab_) return slab_ + at;
    arrays_.push_back({memory_.allocate(bytes), bytes});
    return arrays_.back().first;
  }

 private:
  void free_arrays() {
    for (auto& [p, n] : arrays_) memory_.deallocate(p, n);
    arrays_.clear();
  }
  HostMemory memory_;
  std::byte* slab_ = nullptr;
  std::vector<std::pair<void*, size_t>> arrays_;
};

CpuWeightStore& cpu_store(WeightStore& s) {
  auto* c = dynamic_cast<CpuWeightStore*>(&s);
  if (!c)
    fail(ErrorKind::invalid_argument,
         "cpu backend: weight store '{}' belongs to another backend; make it with this "
         "backend's make_weight_store",
         s.name());
  return *c;
}

template <class T>
void expect_host(const WeightArray<T>& a, const char* what) {
  if (!a.empty() && a.device() != Device::host)
    fail(ErrorKind::invalid_argument,
         "cpu backend: the {} of a weight is in device memory; the CPU backend reads host "
         "arrays (copy the tensors to the host first)",
         what);
}

// The arrays a CPU op reads for `src`, in host memory; `copy`: into the store.
struct Placer {
  CpuWeightStore& store;
  bool copy;
  template <class T>
  WeightArray<T> operator()(const WeightArray<T>& a, const char* what) const {
    expect_host(a, what);
    if (!copy || a.empty()) return a;
    return own(a.span());
  }
  template <class T>
  WeightArray<T> own(std::span<const T> values) const {
    void* p = store.allocate(values.size_bytes());
    if (!values.empty()) std::memcpy(p, values.data(), values.size_bytes());
    return WeightArray<T>::view({static_cast<const T*>(p), values.size()}, nullptr, Device::host);
  }
};

bool copies(Residency r) {
  return r == Residency::streamed;
}

}  // namespace

std::unique_ptr<WeightStore> CpuBackend::make_weight_store(std::string name, size_t capacity) {
  return std::make_unique<CpuWeightStore>(std::move(name), capacity);
}

QuantLinear CpuBackend::prepare(const QuantLinear& src, Residency r, WeightStore& store) {
  src.check_complete("prepare");
  const Placer place{cpu_store(store), copies(r)};
  QuantLinear p;
  p.format = src.format;
  p.out = src.out;
  p.in = src.in;
  p.generation = src.generation;
  switch (src.format) {
    case WeightFormat::bf16:
      p.w_bf16 = place(src.w_bf16, "bf16 values");
      break;
    case WeightFormat::nvfp4:
      // The bf16 GEMM reads the decode; made once here unless the source has it.
      if (!src.w_bf16.empty()) {
        p.w_bf16 = place(src.w_bf16, "bf16 decode");
      } else {
        expect_host(src.fp4_codes, "packed codes");
        expect_host(src.fp4_scales, "block scales");
        const std::vector<uint16_t> decoded = decode_nvfp4_values(src);
        p.w_bf16 = place.own<uint16_t>(decoded);
      }
      break;
    case WeightFormat::f32:
      p.w_f32 = place(src.w_f32, "fp32 values");
      break;
    case WeightFormat::int8:
      p.w_i8 = place(src.w_i8, "int8 values");
      p.w_scale = place(src.w_scale, "row scales");
      break;
    case WeightFormat::w4a8:
      // The int8 GEMM reads the decode; made once here unless the source has it.
      if (!src.w_i8.empty()) {
        p.w_i8 = place(src.w_i8, "int8 decode");
      } else {
        expect_host(src.w4_codes, "packed codes");
        expect_host(src.w4_s_rel, "group scales");
        expect_host(src.w4_codebook, "codebook");
        const std::vector<int8_t> decoded = decode_w4a8_values(src);
        p.w_i8 = place.own<int8_t>(decoded);
      }
      p.w_scale = place(src.w_scale, "row scales");
      break;
  }
  p.bias = place(src.bias, "bias");
  return p;
}

WeightArray<uint16_t> CpuBackend::prepare(const WeightArray<uint16_t>& src, Residency r,
                                          WeightStore& store) {
  const Placer place{cpu_store(store), copies(r)};
  return place(src, "norm values");
}

size_t CpuBackend::prepared_bytes(const QuantLinear& src, Residency r) const {
  auto a = [](size_t bytes) { return bytes ? WeightStore::aligned(bytes) : 0; };
  const bool copy = copies(r);
  const size_t nk = size_t(src.out * src.in);
  const size_t decode = src.format == WeightFormat::w4a8 && src.w_i8.empty()      ? a(nk)
                        : src.format == WeightFormat::nvfp4 && src.w_bf16.empty() ? a(2 * nk)
                                                                                  : 0;
  if (!copy) return decode;
  size_t b = a(src.bias.bytes());
  switch (src.format) {
    case WeightFormat::bf16:
      return b + a(src.w_bf16.bytes());
    case WeightFormat::nvfp4:
      return b + (decode ? decode : a(src.w_bf16.bytes()));
    case WeightFormat::f32:
      return b + a(src.w_f32.bytes());
    case WeightFormat::int8:
      return b + a(src.w_i8.bytes()) + a(src.w_scale.bytes());
    case WeightFormat::w4a8:
      return b + (decode ? decode : a(src.w_i8.bytes())) + a(src.w_scale.bytes());
  }
  return b;
}

size_t CpuBackend::prepared_bytes(const WeightArray<uint16_t>& src, Residency r) const {
  return copies(r) && !src.empty() ? WeightStore::aligned(src.bytes()) : 0;
}

}  // namespace h3s::cpu
