// The NVFP4 -> bf16 device decode (cuda::decode_nvfp4) against the host
// decode of record (h3s::decode_nvfp4_values), bit for bit: random codes and
// e4m3 scale bytes (every byte but the two NaNs), a global scale that is not
// a bf16 value (the product order matters then), and shapes whose rows and
// columns are not multiples of the 16-wide blocks or the 128-row swizzle.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/kernels.hpp"
#include "core/rng.hpp"
#include "gpu_fixture.hpp"
#include "model/quant_linear.hpp"

namespace h3s::test {
namespace {

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

TEST(GpuNvfp4, DeviceDecodeEqualsTheHostDecode) {
  H3S_REQUIRE_GPU();
  Rng r(41);
  for (const auto& [out, in] :
       {std::pair<int64_t, int64_t>{1, 16}, {37, 50}, {130, 17}, {256, 512}, {300, 1000}}) {
    SCOPED_TRACE(::testing::Message() << out << " x " << in);
    const int64_t np = round_up(out, 16), kp = round_up(in, 16);
    QuantLinear q;
    q.format = WeightFormat::nvfp4;
    q.out = out;
    q.in = in;
    std::vector<uint8_t> codes(size_t(np * kp / 2)),
        scales(size_t(round_up(np, 128) * round_up(kp / 16, 4)));
    for (uint8_t& c : codes) c = uint8_t(r.below(256));
    for (uint8_t& s : scales) {
      s = uint8_t(r.below(256));
      if ((s & 0x7f) == 0x7f) s = 0x38;  // not a NaN (the reader refuses those): 1.0
    }
    q.fp4_codes = codes;
    q.fp4_scales = scales;
    q.fp4_global = 0.0123456789f;
    const std::vector<uint16_t> host = decode_nvfp4_values(q);
    DeviceArray<uint8_t> d_codes(codes), d_scales(scales);
    DeviceArray<uint16_t> w(size_t(out * in));
    w.fill_bytes(0xff);
    cuda::decode_nvfp4(d_codes.get(), d_scales.get(), q.fp4_global, w.get(), out, in, nullptr);
    sync_check("decode_nvfp4");
    const std::vector<uint16_t> device = w.download();
    size_t differ = 0;
    for (size_t i = 0; i < host.size(); ++i) differ += host[i] != device[i];
    EXPECT_EQ(differ, 0u) << "of " << host.size();
  }
}

}  // namespace
}  // namespace h3s::test
