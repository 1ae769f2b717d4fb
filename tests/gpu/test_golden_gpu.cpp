// comfy-kitchen's golden vectors (tests/data/golden, README there) through the
// CUDA backend's ops: the int8 SwiGLU fc2 paths (fused fp32 SwiGLU ->
// quantiser -> int8 GEMM for M >= 2, ComfyUI's eager bf16 SwiGLU then the
// int8 linear for M = 1) and the W4A8 linear (with and without codebook).
// Outputs are compared as raw bits. The ConvRot quantiser, q/k norm + RoPE and
// int8 GEMM goldens are in test_ops_gpu.cpp and test_gemm_gpu.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_memory.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/arena.hpp"
#include "gpu_fixture.hpp"
#include "model/quant_linear.hpp"
#include "model/safetensors.hpp"
#include "ops/golden_file.hpp"

namespace h3s::test {
namespace {

class GpuGolden : public GpuBackendTest {
 protected:
  static SafetensorsFile open(const std::string& stem) {
    return SafetensorsFile::open(golden_path(stem));
  }
  // bf16 [rows, cols] host bits -> device -> op -> host bits.
  OwnedTensor upload(const std::vector<uint16_t>& host, int64_t rows, int64_t cols) {
    EXPECT_EQ(host.size(), size_t(rows * cols));
    OwnedTensor d = arena_->tensor(DType::bf16, {rows, cols}, "golden operand");
    gpu_->upload(host.data(), d.view);
    return d;
  }
  std::vector<uint16_t> download(const OwnedTensor& d) {
    std::vector<uint16_t> out(size_t(d.view.numel()));
    gpu_->download(d.view, out.data());
    return out;
  }
};

// a + b through a stream (GCC 12 warns falsely on -O3 std::string +).
std::string key(const std::string& a, const char* b) {
  std::ostringstream s;
  s << a << b;
  return s.str();
}

// Differing elements of two bf16 arrays laid out as rows of `width`, with the
// first few positions for the failure message.
int64_t diff_count(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                   int64_t width, std::string* where) {
  EXPECT_EQ(got.size(), want.size());
  int64_t n = 0;
  std::ostringstream s;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    if (got[i] != want[i] && n++ < 8)
      s << " (" << i / size_t(width) << "," << i % size_t(width) << ")";
  *where = s.str();
  return n;
}

TEST_F(GpuGolden, SwigluFc2FusedAndEagerOutputsBitEqual) {
  const SafetensorsFile g = open("ck_swiglu_fc2");
  constexpr int64_t kFfn = 1024, kOut = 256;
  QuantLinear w;
  w.format = WeightFormat::int8;
  w.out = kOut;
  w.in = kFfn;
  w.w_i8 = g.read_as<int8_t>("weight", "I8");
  w.w_scale = g.read_as<float>("weight_scale", "F32");
  // Fused path (comfy-kitchen's M >= 2 int8 SwiGLU linear).
  for (const int64_t m : {2, 9}) {
    const std::string c = key("M", std::to_string(m).c_str());
    SCOPED_TRACE(c);
    const OwnedTensor f = upload(g.read_as<uint16_t>(key(c, ".f"), "BF16"), m, 2 * kFfn);
    const OwnedTensor y = upload(std::vector<uint16_t>(size_t(m * kOut), 0x7fc1), m, kOut);
    gpu_->swiglu_linear(f.view, on_gpu(w), y.view);
    std::string where;
    EXPECT_EQ(diff_count(download(y), g.read_as<uint16_t>(key(c, ".out"), "BF16"), kOut, &where), 0)
        << c << ".out differs at" << where;
  }
  // M = 1: ComfyUI's eager path, bf16(bf16(silu(g)) * u) then the int8 linear.
  {
    const OwnedTensor f = upload(g.read_as<uint16_t>("M1.f", "BF16"), 1, 2 * kFfn);
    const OwnedTensor act = upload(std::vector<uint16_t>(size_t(kFfn), 0x7fc1), 1, kFfn);
    cuda::swiglu_bf16(static_cast<const uint16_t*>(f.view.data), 2 * kFfn,
                      static_cast<uint16_t*>(act.view.data), kFfn, 1, kFfn, gpu_->stream());
    std::string where;
    EXPECT_EQ(diff_count(download(act), g.read_as<uint16_t>("M1.act_eager", "BF16"), kFfn, &where),
              0)
        << "M1.act_eager differs at" << where;
    const OwnedTensor y = upload(std::vector<uint16_t>(size_t(kOut), 0x7fc1), 1, kOut);
    gpu_->linear(act.view, on_gpu(w), y.view);
    EXPECT_EQ(diff_count(download(y), g.read_as<uint16_t>("M1.out", "BF16"), kOut, &where), 0)
        << "M1.out differs at" << where;
  }
}

TEST_F(GpuGolden, W4A8LinearOutputsBitEqual) {
  const SafetensorsFile g = open("ck_w4a8_linear");
  constexpr int64_t kIn = 512, kOut = 256;
  std::vector<QuantLinear> layers(2);
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string v = i == 0 ? "cb" : "nocb";
    SCOPED_TRACE(v);
    QuantLinear& w = layers[i];
    w.format = WeightFormat::w4a8;
    w.out = kOut;
    w.in = kIn;
    w.w4_codes = g.read_as<uint8_t>(key(v, ".weight"), "I8");
    w.w4_s_rel = g.read_as<uint8_t>(key(v, ".weight_s_rel"), "F8_E4M3");
    w.w_scale = g.read_as<float>(key(v, ".weight_s_channel"), "F32");
    if (v == "cb") w.w4_codebook = g.read_as<float>(key(v, ".weight_codebook"), "F32");
    for (const int64_t m : {1, 9}) {
      const std::string c = key(key(v, ".M"), std::to_string(m).c_str());
      const OwnedTensor x = upload(g.read_as<uint16_t>(key(c, ".x"), "BF16"), m, kIn);
      const OwnedTensor y = upload(std::vector<uint16_t>(size_t(m * kOut), 0x7fc1), m, kOut);
      gpu_->linear(x.view, on_gpu(w), y.view);
      std::string where;
      EXPECT_EQ(diff_count(download(y), g.read_as<uint16_t>(key(c, ".out"), "BF16"), kOut, &where),
                0)
          << c << ".out differs at" << where;
    }
  }
}

}  // namespace
}  // namespace h3s::test
