// CudaBackend: the Backend interface (backend/backend.hpp) on one CUDA stream,
// with the kernels declared in kernels.hpp. Host code: no CUDA headers here.
//
// Memory. Activations and the per-op scratch (the int8 path's quantised rows
// and row scales, the per-row modulation index) come from the caller's Arena,
// which must sit on device memory (CudaMemory). Scratch is taken at the start
// of an op and released when the op has queued its kernels: with a plain
// CudaMemory the release (cudaFree) waits for the device; with a stream-ordered
// CudaMemory on this backend's stream it is ordered after those kernels and
// nothing waits. Weights are model memory, outside the activation arena: ops
// read QuantLinears prepared for this backend (weights/cuda_weights.cpp:
// device views into a CudaWeightStore, or the caller's own device arrays).
//
// Streams. Every kernel and copy goes to one stream: the caller's, or one the
// backend creates. Nothing synchronises except download() and synchronize().
//
// Not thread-safe: one backend per host thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_memory.hpp"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {

// The device pointers of a prepared QuantLinear (Backend::prepare), as the
// GEMM launchers take them; w4_levels are the 16 decode levels.
struct DeviceWeights {
  WeightFormat format = WeightFormat::bf16;
  int64_t out = 0, in = 0;
  const uint16_t* w_bf16 = nullptr;
  const float* w_f32 = nullptr;
  const int8_t* w_i8 = nullptr;
  const uint8_t* w4_codes = nullptr;  // [out, in / 2]
  const uint8_t* w4_s_rel = nullptr;  // [out, in / 16]
  const float* w4_levels = nullptr;   // [16]
  const float* w_scale = nullptr;
  const float* bias = nullptr;
  static DeviceWeights of(const QuantLinear& w);
};

class CudaBackend final : public Backend {
 public:
  // scratch: an arena over device memory. stream: the caller's stream, or
  // nullptr to create (and own) a non-blocking one. attn, gemm: what
  // automatic means in use_kernels (automatic: kernel_choice.hpp's choice
  // for this GPU; the GPU test binary's --attn-kernel and --gemm-kernel
  // set them, so its whole suite runs on one route).
  explicit CudaBackend(Arena& scratch, cudaStream_t stream = nullptr,
                       AttnKernel attn = AttnKernel::automatic,
                       GemmKernel gemm = GemmKernel::automatic);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string_view name() const override { return "cuda"; }
  Device device() const override { return Device::cuda; }
  bool arena_scratch() const override { return true; }
  cudaStream_t stream() const { return stream_; }
  // Queue every later op on `stream` (nullptr: the legacy default stream), for
  // callers that run on whatever stream their framework has current (the
  // Python module). Work already queued on the old stream is ordered before
  // later work by an event, never a synchronisation. A stream the backend
  // created itself is released. Defined in cuda_stream_switch.cpp.
  void set_stream(cudaStream_t stream);
  void use_stream(void* stream) override { set_stream(static_cast<cudaStream_t>(stream)); }
  // Throws Error(invalid_argument) for a request this GPU cannot run (sm90
  // off Hopper), before any op.
  void use_kernels(AttnKernel attn, GemmKernel gemm) override;
  AttnKernel attn_kernel() const { return attn_; }
  GemmKernel gemm_kernel() const { return gemm_; }

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
  void attention_with_ends(const Tensor& q, const KvView& kv, RowRange keys, AttnState& s,
                           AttnEnds ends) override;
  // kvi8r, kvi8s, kvfp4s and kvmix on Hopper; kvfp4s and kvi8r on other
  // GPUs by their decode paths (cuda_kv_tiers.cpp); kvi8s and kvmix fall
  // back there.
  bool has_kv_tier(KvTier tier) const override;
  int64_t kv_tier_decode_keys(KvTier tier) const override;
  void kvi8r_quantize(const Tensor& src, const Tensor& code, const Tensor& scale) override;
  void rotate_heads(const Tensor& t) override;
  void attention_kvi8r(const Tensor& q_rot, const KvI8View& kv, RowRange keys,
                       AttnState& s) override;
  void attn_state_finish_rotated(const AttnState& s, const Tensor& out) override;
  void kvi8r_decode(const KvI8View& kv, RowRange keys, const Tensor& k, const Tensor& v) override;
  void kvi8s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                      int64_t first_row, const KvI8sView& out) override;
  void attention_kvi8s(const Tensor& q_rot, const KvI8sView& kv, RowRange keys,
                       AttnState& s) override;
  void kvfp4s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                       int64_t first_row, const KvFp4sView& out) override;
  void attention_kvfp4s(const Tensor& q_rot, const KvFp4sView& kv, RowRange keys,
                        AttnState& state) override;
  void kvfp4s_decode(const KvFp4sView& kv, RowRange keys, const Tensor& k,
                     const Tensor& v) override;
  void gated_residual(const Tensor& x, const Tensor& y, const Tensor& gate,
                      std::span<const ModRun> runs) override;
  void add_residual(const Tensor& x, const Tensor& y) override;
  void silu(const Tensor& x, const Tensor& y) override;
  void convert(const Tensor& x, const Tensor& y) override;
  void copy(const Tensor& x, const Tensor& y) override;
  void scale(const Tensor& x, float alpha) override;
  void upload(const void* host, const Tensor& dst) override;
  void download(const Tensor& src, void* host) override;
  void synchronize() override;
  double device_seconds(const std::function<void()>& enqueue) override;
  std::string_view attention_kernel() const override;
  std::string kv_tier_kernel(KvTier tier) const override;
  // Staging (cuda_staging.cpp): cached pinned memory, a copy-stream queue.
  MemoryResource& host_staging_memory() override;
  size_t free_device_memory() const override;
  size_t device_memory_in_use() const override;
  void trim_device_cache() override;
  std::unique_ptr<StageQueue> make_stage_queue() override;

  // Weights (weights/cuda_weights.cpp).
  std::unique_ptr<WeightStore> make_weight_store(std::string name, size_t capacity) override;
  QuantLinear prepare(const QuantLinear& src, Residency r, WeightStore& store) override;
  WeightArray<uint16_t> prepare(const WeightArray<uint16_t>& src, Residency r,
                                WeightStore& store) override;
  size_t prepared_bytes(const QuantLinear& src, Residency r) const override;
  size_t prepared_bytes(const WeightArray<uint16_t>& src, Residency r) const override;
  void wait_ready(WeightStore& store) override;
  void release(WeightStore& store) override;
  int device_index() const { return device_; }

 private:
  // The int8 path: ConvRot-quantise rows of x (read as `input`) into scratch,
  // then the exact int8 GEMM (gemm_i8, or gemm_w4a8 for packed w4a8) into y
  // for output features [f0, f0 + n).
  void quantized_linear(const uint16_t* x, int64_t ldx, ActInput input, int64_t m,
                        const DeviceWeights& w, int64_t f0, int64_t n, const Tensor& y);
  // The device int32 [rows] row -> mod row index of `runs` (-1 elsewhere).
  Buffer mod_rows(std::span<const ModRun> runs, int64_t rows);
  // What `tier`'s attention runs here now (kernel_choice.hpp).
  Kernel tier_kernel(KvTier tier) const;

  Arena& scratch_;
  std::unique_ptr<PinnedMemory> pinned_ = std::make_unique<PinnedMemory>();
  cudaStream_t stream_ = nullptr;
  bool own_stream_ = false;
  int device_ = 0;                  // current when the backend was made
  AttnKernel attn_default_, attn_;  // use_kernels' automatic, and the kernels now
  GemmKernel gemm_default_, gemm_;
};

}  // namespace h3s::cuda

namespace h3s {

// The CUDA backend over `scratch` (an Arena on CudaMemory) on `stream`
// (nullptr: the backend creates its own); attn, gemm as CudaBackend's.
std::unique_ptr<Backend> make_cuda_backend(Arena& scratch, cudaStream_t stream = nullptr,
                                           AttnKernel attn = AttnKernel::automatic,
                                           GemmKernel gemm = GemmKernel::automatic);

}  // namespace h3s
