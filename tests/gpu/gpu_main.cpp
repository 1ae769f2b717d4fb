// h3s_tests_gpu's main: gtest's, plus the kernels the suite runs (the
// fixture's suite_kernels): --attn-kernel=default|sm80|sm90 and
// --gemm-kernel=default|sm80, as h3s takes them, so scripts/device-check.sh
// runs the attention, block and GEMM tests again on the mma.sync route
// without an environment variable.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "gpu_fixture.hpp"
#include "h3s/error.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);  // takes gtest's flags out of argv
  h3s::test::SuiteKernels& k = h3s::test::suite_kernels();
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string_view arg = argv[i];
      if (arg.starts_with("--attn-kernel=")) {
        k.attn = h3s::parse_attn_kernel(arg.substr(arg.find('=') + 1));
      } else if (arg.starts_with("--gemm-kernel=")) {
        k.gemm = h3s::parse_gemm_kernel(arg.substr(arg.find('=') + 1));
      } else {
        std::fprintf(stderr,
                     "h3s_tests_gpu: unknown argument %s (gtest's flags, --attn-kernel=default|"
                     "sm80|sm90, --gemm-kernel=default|sm80)\n",
                     argv[i]);
        return 2;
      }
    }
  } catch (const h3s::Error& e) {
    std::fprintf(stderr, "h3s_tests_gpu: %s\n", e.what());
    return 2;
  }
  if (k.attn != h3s::AttnKernel::automatic || k.gemm != h3s::GemmKernel::automatic)
    std::printf("h3s_tests_gpu: attention kernels %s, GEMMs %s\n",
                std::string(h3s::attn_kernel_name(k.attn)).c_str(),
                std::string(h3s::gemm_kernel_name(k.gemm)).c_str());
  return RUN_ALL_TESTS();
}
