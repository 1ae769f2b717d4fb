// The sm_90a primitives (src/backend/cuda/arch) on one tile: TMA loads into
// 128-byte-swizzled shared memory completing on an mbarrier, then wgmma
// through the attention's descriptors, against the CPU product. Small
// integers make every product and sum exact in fp32, so the check is bit
// equality: a wrong swizzle, descriptor field or accumulator layout moves
// values and fails it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "arch_probe.hpp"
#include "core/dtype.hpp"
#include "core/rng.hpp"
#include "gpu_fixture.hpp"

namespace h3s::test {
namespace {

TEST(GpuArch, TmaLoadedWgmmaTileEqualsTheCpuProduct) {
  H3S_REQUIRE_GPU();
  int major = 0;
  cuda_check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0), "device");
  if (major != 9) GTEST_SKIP() << "wgmma and TMA are sm_90 instructions";
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

}  // namespace
}  // namespace h3s::test
