// The sm_90a primitives (src/backend/cuda/arch) on one tile: TMA loads into
// 128-byte-swizzled shared memory completing on an mbarrier, then wgmma
// through the attention's descriptors, against the CPU product. Small
// integers make every product and sum exact in fp32, so the check is bit
// equality: a wrong swizzle, descriptor field or accumulator layout moves
// values and fails it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "arch_probe.hpp"
#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/arch/device_arch_probe.hpp"
#include "backend/cuda/attention/attn_exp2_poly.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/dtype.hpp"
#include "core/rng.hpp"
#include "gpu_fixture.hpp"

namespace h3s::test {
namespace {

// Which image runs: the sm_90a one on Hopper (its kernels then dispatch),
// the compute_80 PTX when the driver is told to JIT it (CUDA_FORCE_PTX_JIT=1,
// the device check's run of the sm_80 code paths), the sm_80 image on Ampere
// and Ada; a W4A8 GEMM pipeline fits the device's shared memory.
TEST(GpuArch, TheLoadedImageDecidesWhichKernelsRun) {
  H3S_REQUIRE_GPU();
  const int cc = cuda::arch::device_compute_capability();
  ASSERT_GE(cc, cuda::arch::kMinComputeCapability);
  const char* jit = std::getenv("CUDA_FORCE_PTX_JIT");
  const bool forced_ptx = jit != nullptr && std::string(jit) == "1";
  const int ptx = cuda::arch::image_ptx_version();
  if (forced_ptx || cc != 90) {
    EXPECT_EQ(ptx, 80) << "cc " << cc << (forced_ptx ? ", PTX JIT forced" : "");
    EXPECT_FALSE(cuda::arch::hopper_kernels());
    EXPECT_NE(cuda::kernel_arch(), cuda::Arch::sm90) << "the Hopper kernels need the sm_90a image";
  } else {
    EXPECT_EQ(ptx, 90);
    EXPECT_TRUE(cuda::arch::hopper_kernels());
    EXPECT_EQ(cuda::kernel_arch(), cuda::Arch::sm90);
  }
  EXPECT_GE(cuda::arch::max_dynamic_smem_bytes(), 86 * 1024) << "the two-stage W4A8 GEMM";
}

TEST(GpuArch, TmaLoadedWgmmaTileEqualsTheCpuProduct) {
  H3S_REQUIRE_GPU();
  int major = 0;
  cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "device");
  if (major != 9 || !cuda::arch::hopper_kernels())
    GTEST_SKIP() << "wgmma and TMA are sm_90a instructions (the sm_90a image is not running)";
  Rng rng(9001);
  auto ints = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (auto& x : v) x = f32_to_bf16(float(int(rng.next_u64() % 9) - 4)).bits;  // -4..4
    return v;
  };
  const std::vector<uint16_t> a = ints(size_t(kProbeM) * kProbeK),
                              b = ints(size_t(kProbeN) * kProbeK);
  const std::vector<float> c = wgmma_tma_probe(a, b);
  int wrong = 0;
  for (int m = 0; m < kProbeM; ++m)
    for (int n = 0; n < kProbeN; ++n) {
      float want = 0.0f;
      for (int k = 0; k < kProbeK; ++k)
        want += bf16_to_f32(bf16{a[size_t(m * kProbeK + k)]}) *
                bf16_to_f32(bf16{b[size_t(n * kProbeK + k)]});
      if (std::memcmp(&want, &c[size_t(m * kProbeN + n)], 4) != 0 && ++wrong <= 5)
        ADD_FAILURE() << "C[" << m << "][" << n << "] = " << c[size_t(m * kProbeN + n)] << ", want "
                      << want;
    }
  EXPECT_EQ(wrong, 0);
}

// The FMA-pipe 2^x of the kvi8s variants is IEEE single operations only, so
// the device gives the host's bits (whose error tests/ops/test_exp2_poly.cpp
// bounds): the softmax's range in 1/1024 steps, each segment's switch
// point, the clamp and below it.
TEST(GpuArch, Exp2PolyGivesTheHostsBits) {
  H3S_REQUIRE_GPU();
  std::vector<float> x;
  for (int i = 0; i <= 140 * 1024; ++i) x.push_back(-131.0f + float(i) / 1024.0f);
  for (int n = -126; n <= 8; ++n)
    for (const float f : {-0.5f, 0.5f})
      for (const float d : {-1e-6f, 0.0f, 1e-6f}) x.push_back(float(n) + f + d);
  for (const float v : {-1e30f, -INFINITY, 8.0f, 0.0f, -0.0f}) x.push_back(v);
  const std::vector<float> y = exp2_poly_probe(x);
  ASSERT_EQ(y.size(), x.size());
  int wrong = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = cuda::attn::exp2_poly(x[i]);
    if (std::memcmp(&want, &y[i], 4) != 0 && ++wrong <= 5)
      ADD_FAILURE() << "exp2_poly(" << x[i] << ") = " << y[i] << " on the device, " << want
                    << " on the host";
  }
  EXPECT_EQ(wrong, 0);
}

}  // namespace
}  // namespace h3s::test
