// GPU test set-up: skip cleanly without a device (or fail, under
// H3S_REQUIRE_GPU=1); device arenas; host <-> device helpers; the kernels
// the suite runs (the binary's --attn-kernel and --gemm-kernel, gpu_main.cpp).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_memory.hpp"
#include "core/arena.hpp"
#include "h3s/options.hpp"

namespace h3s::test {

// The kernels every backend and kernel call of the suite runs unless a test
// names others: `h3s_tests_gpu --attn-kernel=sm80 --gemm-kernel=sm80` runs
// the suite on the mma.sync route (scripts/device-check.sh); default: each
// GPU's own. Set once by main (gpu_main.cpp), before any test.
struct SuiteKernels {
  AttnKernel attn = AttnKernel::automatic;
  GemmKernel gemm = GemmKernel::automatic;
};
inline SuiteKernels& suite_kernels() {
  static SuiteKernels k;
  return k;
}
inline AttnKernel attn_kernel() {
  return suite_kernels().attn;
}
inline GemmKernel gemm_kernel() {
  return suite_kernels().gemm;
}
// The CUDA backend over `arena` on the suite's kernels.
inline std::unique_ptr<Backend> make_gpu_backend(Arena& arena) {
  return make_cuda_backend(arena, nullptr, attn_kernel(), gemm_kernel());
}

// Empty when a CUDA device is usable, else why not (the runtime's own words).
inline std::string cuda_device_problem() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(e);
  }
  return n > 0 ? std::string() : std::string("no CUDA device is visible");
}

// Set (to anything but "" or "0") by every device script: on a GPU machine a
// missing or broken device must fail the run, not skip it into a green one.
inline bool gpu_required() {
  const char* v = std::getenv("H3S_REQUIRE_GPU");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

// Skips the test without a usable device (CI machines compile the suite
// only), fails it instead under H3S_REQUIRE_GPU=1.
#define H3S_REQUIRE_GPU()                                                                 \
  do {                                                                                    \
    const std::string h3s_gpu_problem_ = ::h3s::test::cuda_device_problem();              \
    if (!h3s_gpu_problem_.empty()) {                                                      \
      if (::h3s::test::gpu_required())                                                    \
        GTEST_FAIL() << "H3S_REQUIRE_GPU is set but " << h3s_gpu_problem_;                \
      else                                                                                \
        GTEST_SKIP() << h3s_gpu_problem_ << " (set H3S_REQUIRE_GPU=1 to make this fail)"; \
    }                                                                                     \
  } while (0)

// ---- device helpers ----------------------------------------------------------

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Every kernel launch is followed by this: launch errors and faults surface
// at the call that caused them.
inline void sync_check(const char* what) {
  cuda_check(cudaGetLastError(), what);
  cuda_check(cudaDeviceSynchronize(), what);
}

// A device array of n elements plus `offset` leading bytes, so get() can sit
// off its natural alignment (the kernels' byte-gather paths). Constructed
// from a host vector (uploaded) or from a count (zero-filled).
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<T>& host, size_t offset = 0)
      : n_(host.size()), offset_(offset) {
    cuda_check(cudaMalloc(&raw_, std::max<size_t>(n_ * sizeof(T) + offset, 1)), "cudaMalloc");
    upload(host);
  }
  explicit DeviceArray(size_t n) : DeviceArray(std::vector<T>(n)) {}
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(raw_); }

  T* get() const { return reinterpret_cast<T*>(static_cast<char*>(raw_) + offset_); }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    cuda_check(cudaMemcpy(get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
               "upload");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    cuda_check(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  // Fill with a byte pattern, so unwritten outputs are caught by comparisons.
  void fill_bytes(int v) { cuda_check(cudaMemset(get(), v, n_ * sizeof(T)), "cudaMemset"); }

 private:
  void* raw_ = nullptr;
  size_t n_ = 0, offset_ = 0;
};

// ---- backend fixture -----------------------------------------------------------

// A CudaBackend on an unbudgeted device arena (on the suite's kernels: a
// test that compares kernels calls gpu_->use_kernels, which lasts for the
// test), and a 4-thread CPU backend to compare against. Skips without a
// device; synchronizes after each test.
class GpuBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    H3S_REQUIRE_GPU();
    memory_ = std::make_unique<cuda::CudaMemory>();
    arena_ = std::make_unique<Arena>(*memory_, 0);
    gpu_ = std::make_unique<cuda::CudaBackend>(*arena_, nullptr, attn_kernel(), gemm_kernel());
    cpu_ = make_cpu_backend(4);
    weights_ = gpu_->make_weight_store("test weights", 0);
    cpu_weights_ = cpu_->make_weight_store("test weights (cpu)", 0);
  }
  void TearDown() override {
    if (gpu_) gpu_->synchronize();
  }

  // `w` prepared for the GPU (uploaded into the test's weight store) and
  // ready for the ops issued next.
  QuantLinear on_gpu(const QuantLinear& w) {
    QuantLinear p = gpu_->prepare(w, Residency::resident, *weights_);
    weights_->seal();
    gpu_->wait_ready(*weights_);
    return p;
  }
  // `w` as the CPU backend reads it (its int8 decode of W4A8).
  QuantLinear on_cpu(const QuantLinear& w) {
    return cpu_->prepare(w, Residency::resident, *cpu_weights_);
  }

  std::unique_ptr<cuda::CudaMemory> memory_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<WeightStore> weights_, cpu_weights_;
};

}  // namespace h3s::test
