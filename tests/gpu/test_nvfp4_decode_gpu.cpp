// The NVFP4 -> bf16 device decode (cuda::decode_nvfp4) against the host
// decode of record (h3s::decode_nvfp4_values), bit for bit: random codes and
// e4m3 scale bytes (every byte but the two NaNs), a global scale that is not
// a bf16 value (the product order matters then), and shapes whose rows and
// columns are not multiples of the 16-wide blocks or the 128-row swizzle.
// And CudaBackend::prepare, which runs that decode for packed NVFP4 layers
// (host arrays uploaded packed, device arrays read in place): its bf16 is the
// host decode under every residency, and it counts what it places.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
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

// A packed NVFP4 layer with random codes and scale bytes (no e4m3 NaN: the
// reader refuses those) and a global scale that is not a bf16 value.
QuantLinear random_packed(int64_t out, int64_t in, Rng& r) {
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
    if ((s & 0x7f) == 0x7f) s = 0x38;  // 1.0
  }
  q.fp4_codes = std::move(codes);
  q.fp4_scales = std::move(scales);
  q.fp4_global = 0.0123456789f;
  return q;
}

constexpr std::pair<int64_t, int64_t> kShapes[] = {
    {1, 16}, {37, 50}, {130, 17}, {256, 512}, {300, 1000}};

TEST(GpuNvfp4, DeviceDecodeEqualsTheHostDecode) {
  H3S_REQUIRE_GPU();
  Rng r(41);
  for (const auto& [out, in] : kShapes) {
    SCOPED_TRACE(::testing::Message() << out << " x " << in);
    const QuantLinear q = random_packed(out, in, r);
    const std::vector<uint16_t> host = decode_nvfp4_values(q);
    DeviceArray<uint8_t> d_codes(q.fp4_codes.to_vector()), d_scales(q.fp4_scales.to_vector());
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

using GpuNvfp4Prepare = GpuBackendTest;

TEST_F(GpuNvfp4Prepare, DecodesPackedArraysFromHostAndDeviceUnderEveryResidency) {
  Rng r(43);
  for (const auto& [out, in] : kShapes) {
    const QuantLinear host = random_packed(out, in, r);
    const std::vector<uint16_t> want = decode_nvfp4_values(host);
    DeviceArray<uint8_t> d_codes(host.fp4_codes.to_vector()), d_scales(host.fp4_scales.to_vector());
    QuantLinear device = host;  // ComfyUI's case: the packed arrays are CUDA tensors
    device.fp4_codes =
        WeightArray<uint8_t>::view({d_codes.get(), host.fp4_codes.size()}, nullptr, Device::cuda);
    device.fp4_scales =
        WeightArray<uint8_t>::view({d_scales.get(), host.fp4_scales.size()}, nullptr, Device::cuda);
    const size_t bf16_bytes = WeightStore::aligned(size_t(out * in) * 2);
    for (const QuantLinear* src : std::array<const QuantLinear*, 2>{&host, &device})
      for (const Residency res : {Residency::resident, Residency::streamed, Residency::borrowed}) {
        SCOPED_TRACE(::testing::Message()
                     << out << " x " << in << (src == &host ? " host" : " device") << " "
                     << residency_name(res));
        const std::unique_ptr<WeightStore> store = gpu_->make_weight_store("nvfp4", 0);
        const size_t predicted = gpu_->prepared_bytes(*src, res);
        const QuantLinear p = gpu_->prepare(*src, res, *store);
        store->seal();
        gpu_->wait_ready(*store);
        EXPECT_EQ(store->bytes(), predicted);
        // Device arrays are read in place: the store holds the decode only.
        if (src == &device) {
          EXPECT_EQ(predicted, bf16_bytes);
        } else {
          EXPECT_GT(predicted, bf16_bytes);
        }
        ASSERT_EQ(p.w_bf16.device(), Device::cuda);
        ASSERT_EQ(p.w_bf16.size(), want.size());
        std::vector<uint16_t> got(want.size());
        cuda_check(cudaMemcpy(got.data(), p.w_bf16.data(), got.size() * 2, cudaMemcpyDeviceToHost),
                   "download");
        size_t differ = 0;
        for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
        EXPECT_EQ(differ, 0u) << "of " << want.size();
        gpu_->release(*store);
      }
  }
}

}  // namespace
}  // namespace h3s::test
