// Weight formats built from a bf16 master: int8 ConvRot and W4A8 stay close to
// the master (they quantise a rotated copy), W4A8 decode follows its formula,
// and the synthetic presets are deterministic.
#include <gtest/gtest.h>

#include <cmath>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "model/convrot.hpp"
#include "model/quant_linear.hpp"
#include "model/weights.hpp"

namespace h3s {
namespace {

std::vector<uint16_t> master(int64_t n, int64_t k) {
  Rng r(5);
  std::vector<uint16_t> w(static_cast<size_t>(n * k));
  for (auto& v : w) v = f32_to_bf16(0.05f * r.normal()).bits;
  return w;
}

// Rotating x and W by the same orthonormal Hadamard leaves x.W unchanged, so
// dequantised int8 / W4A8 products approximate the bf16 product.
double rel_error(const QuantLinear& q, const std::vector<uint16_t>& w, int64_t n, int64_t k) {
  Rng r(6);
  std::vector<float> x(static_cast<size_t>(k)), xr;
  for (float& v : x) v = r.normal();
  xr = x;
  for (int64_t g = 0; g < k; g += 256) convrot_rotate_group(xr.data() + g);
  double err = 0, ref = 0;
  for (int64_t j = 0; j < n; ++j) {
    double exact = 0, approx = 0;
    for (int64_t i = 0; i < k; ++i) {
      exact += double(x[size_t(i)]) * bf16_to_f32(bf16{w[size_t(j * k + i)]});
      approx += double(xr[size_t(i)]) * q.w_i8[size_t(j * k + i)] * q.w_scale[size_t(j)];
    }
    err += (exact - approx) * (exact - approx);
    ref += exact * exact;
  }
  return std::sqrt(err / ref);
}

TEST(QuantLinear, Int8AndW4a8ApproximateTheMaster) {
  const int64_t n = 64, k = 512;
  const std::vector<uint16_t> w = master(n, k);
  const QuantLinear i8 = QuantLinear::from_bf16(w, n, k, WeightFormat::int8);
  const QuantLinear w4 = QuantLinear::from_bf16(w, n, k, WeightFormat::w4a8);
  // Measured 0.0091 (int8) and 0.092 (4-bit levels, e4m3 group scales) on this seed.
  EXPECT_LT(rel_error(i8, w, n, k), 0.02);
  EXPECT_LT(rel_error(w4, w, n, k), 0.12);
  EXPECT_GT(rel_error(w4, w, n, k), rel_error(i8, w, n, k));
}

TEST(QuantLinear, W4a8DecodeFollowsTheFormula) {
  QuantLinear q;
  q.format = WeightFormat::w4a8;
  q.out = 1;
  q.in = 32;
  std::vector<uint8_t> codes(16, 0);
  codes[0] = 0x1f;  // column 0 = code 15 (low nibble), column 1 = code 1
  q.w4_codes = codes;
  q.w4_s_rel = std::vector<uint8_t>{f32_to_e4m3(20.0f), f32_to_e4m3(0.5f)};
  q.w_scale = std::vector<float>{1.0f};
  decode_w4a8(q);
  EXPECT_EQ(q.w_i8[0], 127);   // (15 - 8) * 20 = 140 clamps to 127
  EXPECT_EQ(q.w_i8[1], -127);  // (1 - 8) * 20 = -140 clamps to -127
  EXPECT_EQ(q.w_i8[2], -127);  // code 0: -8 * 20 = -160 clamps to -127
  EXPECT_EQ(q.w_i8[16], -4);   // code 0 in group 1: -8 * 0.5
  std::vector<float> codebook(16, 0.0f);
  codebook[15] = 0.25f;
  codebook[1] = -0.125f;
  q.w4_codebook = codebook;
  decode_w4a8(q);
  EXPECT_EQ(q.w_i8[0], 5);   // rne(0.25 * 20) = 5
  EXPECT_EQ(q.w_i8[1], -2);  // rne(-0.125 * 20) = -2.5 -> -2 (ties to even)
}

// full_precision_matrix_mult: a single code in a group dequantises to the
// scale times that column of H256 = (h4 x h4 x h4 x h4) / 16, every entry
// +-1/16 with h4's signs: the rotation is undone, normalised, per group.
TEST(QuantLinear, FullPrecisionDequantisationUndoesTheRotation) {
  const float h4[4][4] = {{1, 1, 1, -1}, {1, 1, -1, 1}, {1, -1, 1, 1}, {-1, 1, 1, 1}};
  for (const int64_t j : {0, 1, 77, 255}) {
    QuantLinear q;
    q.format = WeightFormat::int8;
    q.out = 2;
    q.in = 512;
    std::vector<int8_t> w8(size_t(q.out * q.in), 0);
    w8[size_t(256 + j)] = 64;   // row 0, group 1, column j
    w8[size_t(q.in + j)] = -2;  // row 1, group 0, column j
    q.w_i8 = w8;
    q.w_scale = std::vector<float>{0.5f, 3.0f};
    const std::vector<uint16_t> w = dequantise_convrot_bf16(q);
    for (int64_t i = 0; i < 256; ++i) {
      float sign = 1;  // H256[i][j]: the product of h4 over the four base-4 digits
      for (int64_t d = 1; d < 256; d *= 4) sign *= h4[(i / d) % 4][(j / d) % 4];
      SCOPED_TRACE(::testing::Message() << "column " << j << ", row " << i);
      EXPECT_EQ(bf16_to_f32(bf16{w[size_t(256 + i)]}), sign * 64 * 0.5f / 16);
      EXPECT_EQ(bf16_to_f32(bf16{w[size_t(i)]}), 0.0f);
      EXPECT_EQ(bf16_to_f32(bf16{w[size_t(q.in + i)]}), sign * -2 * 3.0f / 16);
      EXPECT_EQ(bf16_to_f32(bf16{w[size_t(q.in + 256 + i)]}), 0.0f);
    }
  }
}

// Dequantised int8 and W4A8 weights approximate the bf16 master they were
// quantised from (in the master's own basis); W4A8 rounds to bf16 before
// rotating back, as ComfyUI does.
TEST(QuantLinear, FullPrecisionDequantisationApproximatesTheMaster) {
  const int64_t n = 64, k = 512;
  const std::vector<uint16_t> w = master(n, k);
  auto rel = [&](const std::vector<uint16_t>& d) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      const double a = bf16_to_f32(bf16{w[i]}), b = bf16_to_f32(bf16{d[i]});
      err += (a - b) * (a - b);
      ref += a * a;
    }
    return std::sqrt(err / ref);
  };
  const QuantLinear i8 = QuantLinear::from_bf16(w, n, k, WeightFormat::int8);
  QuantLinear w4 = QuantLinear::from_bf16(w, n, k, WeightFormat::w4a8);
  // The same order as the int8 activation error above (0.0091 / 0.092).
  EXPECT_LT(rel(dequantise_convrot_bf16(i8)), 0.02);
  const std::vector<uint16_t> d4 = dequantise_convrot_bf16(w4);
  EXPECT_LT(rel(d4), 0.12);
  // The W4A8 path's intermediate bf16 rounding: the int8 decode dequantised
  // as int8 (no intermediate rounding) differs from it in some elements.
  QuantLinear as_int8 = w4;
  as_int8.format = WeightFormat::int8;
  as_int8.w_i8 = decode_w4a8_values(w4);
  const std::vector<uint16_t> d8 = dequantise_convrot_bf16(as_int8);
  size_t differ = 0;
  double err = 0, ref = 0;
  for (size_t i = 0; i < d4.size(); ++i) {
    differ += d4[i] != d8[i];
    const double a = bf16_to_f32(bf16{d4[i]}), b = bf16_to_f32(bf16{d8[i]});
    err += (a - b) * (a - b);
    ref += b * b;
  }
  EXPECT_GT(differ, 0u);
  // ... by bf16 roundings (2^-9 relative a term) only.
  EXPECT_LT(std::sqrt(err / ref), 4e-3);
}

TEST(QuantLinear, BadShapesAreRejected) {
  const std::vector<uint16_t> w = master(4, 100);
  EXPECT_THROW(QuantLinear::from_bf16(w, 4, 100, WeightFormat::int8), Error);
  EXPECT_THROW(parse_format("fp8"), Error);
}

TEST(ModelWeights, RandomPresetsAreDeterministicPerSeed) {
  const ModelConfig c = ModelConfig::tiny();
  const ModelWeights a = ModelWeights::random(c, WeightFormat::int8, 3);
  const ModelWeights b = ModelWeights::random(c, WeightFormat::int8, 3);
  const ModelWeights d = ModelWeights::random(c, WeightFormat::int8, 4);
  EXPECT_EQ(a.blocks[1].attn.qkv.w_i8.to_vector(), b.blocks[1].attn.qkv.w_i8.to_vector());
  EXPECT_NE(a.blocks[1].attn.qkv.w_i8.to_vector(), d.blocks[1].attn.qkv.w_i8.to_vector());
  EXPECT_EQ(a.blocks.size(), size_t(c.blocks));
  EXPECT_EQ(a.refiner.size(), size_t(c.refiner_blocks));
  EXPECT_EQ(a.blocks[0].attn.qkv.out, 3 * c.inner());
  EXPECT_EQ(a.blocks[0].adaln.out, 6 * 3 * c.hidden);
  EXPECT_EQ(a.final_layer.video_out.format, WeightFormat::f32);
  EXPECT_EQ(a.condition_proj.format, WeightFormat::bf16);
}

}  // namespace
}  // namespace h3s
