// CudaBackend: the Backend interface (backend/backend.hpp) on one CUDA stream,
// with the kernels declared in kernels.hpp. Host code: no CUDA headers here.
//
// Memory. Activations and the per-op scratch (the int8 path's quantised rows
// and row scales, the per-row modulation index) come from the caller's Arena,
// which must sit on device memory (CudaMemory). Scratch is taken at the start
// of an op and released when the op has queued its kernels: with a plain
// CudaMemory the release (cudaFree) waits for the device; with a stream-ordered
// CudaMemory on this backend's stream it is ordered after those kernels and
// nothing waits. Weights are model memory, outside the activation arena: each
// QuantLinear (host memory) is uploaded on first use into a cache owned by the
// backend, allocated from its own CudaMemory and reported by weight_bytes().
//
// Streams. Every kernel and copy goes to one stream: the caller's, or one the
// backend creates. Nothing synchronises except download() and synchronize().
//
// Not thread-safe: one backend per host thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_memory.hpp"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {

// One QuantLinear on the device, in the form its GEMM reads: bf16 (bf16 and
// nvfp4, which is dequantised at load), fp32 (f32), int8 + fp32 row scales
// (int8), packed w4a8 (codes, e4m3 group scales, the 16 levels and fp32 row
// scales: gemm_w4a8 decodes them to int8 in the kernel, so the device holds
// ~0.56 bytes per weight instead of 1); bias as fp32. Pointers are into
// `blocks`.
struct DeviceWeights {
  WeightFormat format = WeightFormat::bf16;
  int64_t out = 0, in = 0;
  const void* host_data = nullptr;  // the host array uploaded (address-reuse guard)
  const uint16_t* w_bf16 = nullptr;
  const float* w_f32 = nullptr;
  const int8_t* w_i8 = nullptr;
  const uint8_t* w4_codes = nullptr;  // [out, in / 2]
  const uint8_t* w4_s_rel = nullptr;  // [out, in / 16]
  const float* w4_levels = nullptr;   // [16]: the codebook, or code - 8
  const float* w_scale = nullptr;
  const float* bias = nullptr;
  std::vector<std::pair<void*, size_t>> blocks;
  size_t bytes = 0;
};

class CudaBackend final : public Backend {
 public:
  // scratch: an arena over device memory. stream: the caller's stream, or
  // nullptr to create (and own) a non-blocking one.
  explicit CudaBackend(Arena& scratch, cudaStream_t stream = nullptr);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  Device device() const override { return Device::cuda; }
  cudaStream_t stream() const { return stream_; }
  // Queue every later op on `stream` (nullptr: the legacy default stream), for
  // callers that run on whatever stream their framework has current (the
  // Python module). Work already queued on the old stream is ordered before
  // later work by an event, never a synchronisation. A stream the backend
  // created itself is released. Defined in cuda_stream_switch.cpp.
  void set_stream(cudaStream_t stream);

  void rms_norm_mod(const Tensor& x, const Tensor& gamma, float eps, const ModTable* mod,
                    std::span<const ModRun> runs, const Tensor& out) override;
  void linear(const Tensor& x, const QuantLinear& w, const Tensor& y,
              RowRange features = {}) override;
  void swiglu_linear(const Tensor& f, const QuantLinear& w, const Tensor& y) override;
  void qk_norm_rope(const Tensor& t, const Tensor& w, const Tensor& rope, float eps,
                    int64_t rot_dim) override;
  void attn_state_reset(AttnState& s) override;
  void attention(const Tensor& q, const KvView& kv, RowRange keys, AttnState& s) override;
  void attn_state_finish(const AttnState& s, const Tensor& out) override;
  void gated_residual(const Tensor& x, const Tensor& y, const Tensor& gate,
                      std::span<const ModRun> runs) override;
  void add_residual(const Tensor& x, const Tensor& y) override;
  void silu(const Tensor& x, const Tensor& y) override;
  void convert(const Tensor& x, const Tensor& y) override;
  void copy(const Tensor& x, const Tensor& y) override;
  void scale(const Tensor& x, float alpha) override;
  Tensor weight(const std::vector<uint16_t>& v) override;
  void upload(const void* host, const Tensor& dst) override;
  void download(const Tensor& src, void* host) override;
  void synchronize() override;

  // The weight cache. It is keyed by the QuantLinear's address and checked
  // against its format, shape and host array, so a QuantLinear destroyed and
  // another built at the same address is uploaded again; a QuantLinear whose
  // values change in place must be evicted by the caller.
  const DeviceWeights& weights(const QuantLinear& w);
  void evict(const QuantLinear& w);
  // The same for a small weight vector handed to weight(): its device copy is
  // keyed by the vector's data pointer, which a new vector may reuse once
  // this one is freed, so free-and-reload callers must evict first.
  void evict(const std::vector<uint16_t>& v);
  void clear_weights();
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  // The int8 path: ConvRot-quantise rows of x (read as `input`) into scratch,
  // then the exact int8 GEMM (gemm_i8, or gemm_w4a8 for packed w4a8) into y
  // for output features [f0, f0 + n).
  void quantized_linear(const uint16_t* x, int64_t ldx, ActInput input, int64_t m,
                        const DeviceWeights& w, int64_t f0, int64_t n, const Tensor& y);
  // The device int32 [rows] row -> mod row index of `runs` (-1 elsewhere).
  Buffer mod_rows(std::span<const ModRun> runs, int64_t rows);
  void release(DeviceWeights& d);

  Arena& scratch_;
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  CudaMemory weight_memory_;  // plain cudaMalloc: weights live as long as the backend
  std::unordered_map<const QuantLinear*, DeviceWeights> weights_;
  // Norm weights by host address: (device copy, bytes, host size guard).
  struct SmallWeight {
    void* data = nullptr;
    size_t bytes = 0;
  };
  std::unordered_map<const void*, SmallWeight> small_weights_;
  size_t weight_bytes_ = 0;
};

}  // namespace h3s::cuda

namespace h3s {

// The CUDA backend over `scratch` (an Arena on CudaMemory) on `stream`
// (nullptr: the backend creates its own).
std::unique_ptr<Backend> make_cuda_backend(Arena& scratch, cudaStream_t stream = nullptr);

}  // namespace h3s
