// CudaBackend's weights: prepare() puts each array the kernels read into a
// CudaWeightStore (uploaded through pinned staging, or copied device to
// device), or, for a borrowed source already on the GPU in that form, uses
// the caller's memory in place (ComfyUI's tensors: zero copy). Kernel forms:
// bf16, fp32, int8 + fp32 row scales, w4a8 packed (codes, e4m3 group scales,
// fp32 row scales and the 16 decode levels in w4_codebook: the codebook, or
// code - 8), fp32 bias; nvfp4 as its bf16 decode, made in the store by a
// kernel on the store's stream from the packed arrays (read in place when
// they are the caller's device memory, else uploaded packed: 0.28x the bf16
// bytes over the bus).
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/weights/cuda_weight_store.hpp"
#include "core/error.hpp"

namespace h3s::cuda {

namespace {

CudaWeightStore& cuda_store(WeightStore& s) {
  auto* c = dynamic_cast<CudaWeightStore*>(&s);
  if (!c)
    fail(ErrorKind::invalid_argument,
         "cuda backend: weight store '{}' belongs to another backend; make it with this "
         "backend's make_weight_store",
         s.name());
  return *c;
}

// The kernels load weight rows with 16-byte vector loads (cp.async).
bool kernel_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <class T>
bool borrowable(const WeightArray<T>& a, Residency r) {
  return r == Residency::borrowed && a.device() == Device::cuda && kernel_aligned(a.data());
}

template <class T>
size_t placed_bytes(const WeightArray<T>& a, Residency r) {
  return a.empty() || borrowable(a, r) ? 0 : WeightStore::aligned(a.bytes());
}

// The packed NVFP4 arrays are read by the decode kernel only, which has no
// alignment need: device arrays are read in place under every residency.
template <class T>
size_t packed_bytes(const WeightArray<T>& a) {
  return a.empty() || a.device() == Device::cuda ? 0 : WeightStore::aligned(a.bytes());
}

std::vector<float> default_levels() {
  std::vector<float> v(16);
  for (int c = 0; c < 16; ++c) v[size_t(c)] = float(c - 8);
  return v;
}

}  // namespace

std::unique_ptr<WeightStore> CudaBackend::make_weight_store(std::string name, size_t capacity) {
  return std::make_unique<CudaWeightStore>(std::move(name), capacity, device_);
}

QuantLinear CudaBackend::prepare(const QuantLinear& src, Residency r, WeightStore& store) {
  src.check_complete("prepare");
  CudaWeightStore& s = cuda_store(store);
  auto place = [&]<class T>(const WeightArray<T>& a) -> WeightArray<T> {
    if (a.empty() || borrowable(a, r)) return a;
    if (a.device() == Device::cuda) s.order_after(stream_);  // written on the caller's stream
    void* p = s.allocate(a.bytes());
    s.copy_in(p, a.data(), a.bytes(), a.device());
    return WeightArray<T>::view({static_cast<const T*>(p), a.size()}, nullptr, Device::cuda);
  };
  QuantLinear p;
  p.format = src.format;
  p.out = src.out;
  p.in = src.in;
  p.generation = src.generation;
  switch (src.format) {
    case WeightFormat::bf16:
      p.w_bf16 = place(src.w_bf16);
      break;
    case WeightFormat::nvfp4: {
      if (!src.w_bf16.empty()) {  // a decode made by the caller
        p.w_bf16 = place(src.w_bf16);
        break;
      }
      // Host arrays are uploaded packed; device arrays are read where they are.
      auto packed = [&](const WeightArray<uint8_t>& a) {
        if (a.device() == Device::cuda) {
          s.order_after(stream_);  // written on the caller's stream
          return a;
        }
        return place(a);
      };
      const WeightArray<uint8_t> codes = packed(src.fp4_codes), scales = packed(src.fp4_scales);
      auto* w = static_cast<uint16_t*>(s.allocate(size_t(src.out * src.in) * sizeof(uint16_t)));
      decode_nvfp4(codes.data(), scales.data(), src.fp4_global, w, src.out, src.in, s.writer());
      p.w_bf16 = WeightArray<uint16_t>::view({w, size_t(src.out * src.in)}, nullptr, Device::cuda);
      break;
    }
    case WeightFormat::f32:
      p.w_f32 = place(src.w_f32);
      break;
    case WeightFormat::int8:
      p.w_i8 = place(src.w_i8);
      p.w_scale = place(src.w_scale);
      break;
    case WeightFormat::w4a8: {
      // Packed, not a decoded w_i8: gemm_w4a8 decodes in the kernel (~0.56 B per weight).
      const size_t nk = size_t(src.out * src.in);
      if (src.w4_codes.size() != nk / 2 || src.w4_s_rel.size() != nk / size_t(kW4Group) ||
          (!src.w4_codebook.empty() && src.w4_codebook.size() != 16))
        fail(ErrorKind::invalid_argument,
             "prepare: w4a8 weight [{}, {}] needs {} code bytes, {} group scales and an empty or "
             "16-entry codebook (has {}, {}, {})",
             src.out, src.in, nk / 2, nk / size_t(kW4Group), src.w4_codes.size(),
             src.w4_s_rel.size(), src.w4_codebook.size());
      p.w4_codes = place(src.w4_codes);
      p.w4_s_rel = place(src.w4_s_rel);
      p.w4_codebook =
          place(src.w4_codebook.empty() ? WeightArray<float>(default_levels()) : src.w4_codebook);
      p.w_scale = place(src.w_scale);
      break;
    }
  }
  p.bias = place(src.bias);
  return p;
}

WeightArray<uint16_t> CudaBackend::prepare(const WeightArray<uint16_t>& src, Residency r,
                                           WeightStore& store) {
  CudaWeightStore& s = cuda_store(store);
  if (src.empty() || borrowable(src, r)) return src;
  if (src.device() == Device::cuda) s.order_after(stream_);
  void* p = s.allocate(src.bytes());
  s.copy_in(p, src.data(), src.bytes(), src.device());
  return WeightArray<uint16_t>::view({static_cast<const uint16_t*>(p), src.size()}, nullptr,
                                     Device::cuda);
}

size_t CudaBackend::prepared_bytes(const QuantLinear& src, Residency r) const {
  size_t b = placed_bytes(src.bias, r);
  switch (src.format) {
    case WeightFormat::bf16:
      return b + placed_bytes(src.w_bf16, r);
    case WeightFormat::nvfp4:
      if (!src.w_bf16.empty()) return b + placed_bytes(src.w_bf16, r);
      return b + WeightStore::aligned(size_t(src.out * src.in) * sizeof(uint16_t)) +
             packed_bytes(src.fp4_codes) + packed_bytes(src.fp4_scales);
    case WeightFormat::f32:
      return b + placed_bytes(src.w_f32, r);
    case WeightFormat::int8:
      return b + placed_bytes(src.w_i8, r) + placed_bytes(src.w_scale, r);
    case WeightFormat::w4a8:
      return b + placed_bytes(src.w4_codes, r) + placed_bytes(src.w4_s_rel, r) +
             placed_bytes(src.w_scale, r) +
             (src.w4_codebook.empty() ? WeightStore::aligned(16 * sizeof(float))
                                      : placed_bytes(src.w4_codebook, r));
  }
  return b;
}

size_t CudaBackend::prepared_bytes(const WeightArray<uint16_t>& src, Residency r) const {
  return placed_bytes(src, r);
}

void CudaBackend::wait_ready(WeightStore& store) {
  cuda_store(store).make_wait(stream_);
}

void CudaBackend::release(WeightStore& store) {
  cuda_store(store).record_free(stream_);
}

}  // namespace h3s::cuda
