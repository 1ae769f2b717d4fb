// NVFP4 weights against an outside reference: tests/data/golden/ck_nvfp4_weight.safetensors,
// quantised and dequantised by comfy-kitchen 0.2.31's own PyTorch code (generator and
// provenance: tests/data/golden/make_nvfp4_golden.py and README.md there). Every
// comparison is on raw bits; there is no tolerance.
//
//  (a) decode_nvfp4 on comfy-kitchen's stored weight / weight_scale / weight_scale_2
//      == comfy-kitchen's dequantisation (`.deq`, the arithmetic of its CUDA kernel);
//  (b) our quantiser on the bf16 master == comfy-kitchen's codes, scales and global;
//  (c) nvfp4_scale_offset == comfy-kitchen's to_blocked swizzle for every (row, block);
// and the data really pins the nibble order, the swizzle and the rounding order down:
// each wrong variant mismatches.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/quant_linear.hpp"
#include "model/safetensors.hpp"

namespace h3s {
namespace {

struct GoldenCase {
  const char* name;
  int64_t n, k;
  bool bf16_master;  // quantised from the bf16 weight (else from its fp32 upcast)
};

// The file's cases (README.md, "ck_nvfp4_weight.safetensors").
constexpr GoldenCase kCases[] = {
    {"n7_k16", 7, 16, true},
    {"n40_k40", 40, 40, true},
    {"n130_k72", 130, 72, true},
    {"n256_k64", 256, 64, true},
    {"n32_k64_f32global", 32, 64, false},
};

const SafetensorsFile& golden() {
  static const SafetensorsFile f =
      SafetensorsFile::open(std::string(H3S_TEST_DATA_DIR) + "/golden/ck_nvfp4_weight.safetensors");
  return f;
}

std::string key(const GoldenCase& c, const char* what) {
  return std::string(c.name) + "." + what;
}

// comfy-kitchen's stored layer as our loader holds it (raw codes and e4m3 bytes).
QuantLinear stored_layer(const GoldenCase& c) {
  const SafetensorsFile& f = golden();
  QuantLinear q;
  q.format = WeightFormat::nvfp4;
  q.out = c.n;
  q.in = c.k;
  q.fp4_codes = f.read_as<uint8_t>(key(c, "qdata"), "U8");
  q.fp4_scales = f.read_as<uint8_t>(key(c, "scale"), "F8_E4M3");
  const std::vector<float> g = f.read_as<float>(key(c, "scale_2"), "F32");
  EXPECT_EQ(g.size(), 1u);
  q.fp4_global = g.at(0);
  return q;
}

int64_t blocks_of(const GoldenCase& c) {
  return round_up(c.k, 16) / 16;
}
int64_t scale_cols_of(const GoldenCase& c) {
  return round_up(blocks_of(c), 4);
}

// Differing elements of two bf16 arrays [rows, cols], with the first few spelled out.
struct Mismatch {
  int64_t count = 0;
  std::string first;
};
Mismatch compare(std::span<const uint16_t> got, std::span<const uint16_t> want, int64_t cols) {
  Mismatch m;
  std::ostringstream s;
  if (got.size() != want.size()) {
    m.count = int64_t(std::max(got.size(), want.size()));
    m.first = " sizes differ";
    return m;
  }
  for (size_t i = 0; i < want.size(); ++i)
    if (got[i] != want[i]) {
      if (m.count++ < 4)
        s << " (" << int64_t(i) / cols << ", " << int64_t(i) % cols << "): got 0x" << std::hex
          << got[i] << " want 0x" << want[i] << std::dec << ";";
    }
  m.first = s.str();
  return m;
}

// A decode with every choice spelled out, to show that each wrong choice is caught.
enum class Nibble { even_high, even_low };
enum class Order { code_x_scale_global, code_global_scale, eager_bf16 };
std::vector<uint16_t> decode_variant(const QuantLinear& q, Nibble nib, Order order,
                                     const std::function<int64_t(int64_t, int64_t)>& offset) {
  const int64_t kp = round_up(q.in, 16);
  std::vector<uint16_t> out(size_t(q.out * q.in));
  for (int64_t n = 0; n < q.out; ++n)
    for (int64_t k = 0; k < q.in; ++k) {
      const uint8_t byte = q.fp4_codes.span()[size_t(n * (kp / 2) + k / 2)];
      const bool high = (k % 2 == 0) == (nib == Nibble::even_high);
      const float c = e2m1_to_f32(high ? uint8_t(byte >> 4) : uint8_t(byte & 0x0f));
      const float s = e4m3_to_f32(q.fp4_scales.span()[size_t(offset(n, k / 16))]);
      const float g = q.fp4_global;
      float v = 0.0f;
      switch (order) {
        case Order::code_x_scale_global:  // comfy-kitchen CUDA kernel / fp32 eager
          v = c * (s * g);
          break;
        case Order::code_global_scale:
          v = (c * g) * s;
          break;
        case Order::eager_bf16:  // comfy-kitchen eager with output_type bf16
          v = c * round_bf16(round_bf16(g) * s);
          break;
      }
      out[size_t(n * q.in + k)] = f32_to_bf16(v).bits;
    }
  return out;
}

TEST(Nvfp4Golden, FileHoldsTheDocumentedCases) {
  const SafetensorsFile& f = golden();
  EXPECT_EQ(f.metadata().at("comfy_kitchen_version"), "0.2.31");
  EXPECT_EQ(f.metadata().at("comfy_kitchen_commit"), "7d86acf60c88fd6c3c733c0e54db22ef74b8d77f");
  EXPECT_EQ(f.names().size(), std::size(kCases) * 7);
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const int64_t np = round_up(c.n, 16), kp = round_up(c.k, 16);
    EXPECT_EQ(f.entry(key(c, "w")).shape, (std::vector<int64_t>{c.n, c.k}));
    EXPECT_EQ(f.entry(key(c, "qdata")).shape, (std::vector<int64_t>{np, kp / 2}));
    EXPECT_EQ(f.entry(key(c, "scale")).shape,
              (std::vector<int64_t>{round_up(np, 128), scale_cols_of(c)}));
    EXPECT_TRUE(f.entry(key(c, "scale_2")).shape.empty());
    EXPECT_EQ(f.entry(key(c, "deq")).shape, (std::vector<int64_t>{c.n, c.k}));
    EXPECT_EQ(f.entry(key(c, "deq_eager")).shape, (std::vector<int64_t>{c.n, c.k}));
    EXPECT_EQ(f.entry(key(c, "swizzle")).shape, f.entry(key(c, "scale")).shape);
  }
}

// (a) Our decode reproduces comfy-kitchen's dequantisation bit for bit.
TEST(Nvfp4Golden, DecodeMatchesComfyKitchenBitForBit) {
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(c.name);
    QuantLinear q = stored_layer(c);
    decode_nvfp4(q);
    const std::vector<uint16_t> want = golden().read_as<uint16_t>(key(c, "deq"), "BF16");
    const Mismatch m = compare(q.w_bf16, want, c.k);
    EXPECT_EQ(m.count, 0) << "of " << want.size() << ":" << m.first;
  }
}

// ComfyUI's other dequantiser: comfy-kitchen's eager backend with output_type bf16 (CPU,
// or a GPU without the CUDA backend) rounds the global and the combined scale to bf16
// first. The rule below reproduces it exactly; it differs from `.deq` unless every
// product is exact in bf16.
TEST(Nvfp4Golden, EagerBf16DequantIsBf16ScaleThenProduct) {
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const QuantLinear q = stored_layer(c);
    const int64_t cols = scale_cols_of(c);
    const auto swz = [cols](int64_t r, int64_t b) { return nvfp4_scale_offset(r, b, cols); };
    const std::vector<uint16_t> eager = golden().read_as<uint16_t>(key(c, "deq_eager"), "BF16");
    const Mismatch m =
        compare(decode_variant(q, Nibble::even_high, Order::eager_bf16, swz), eager, c.k);
    EXPECT_EQ(m.count, 0) << m.first;
    const std::vector<uint16_t> deq = golden().read_as<uint16_t>(key(c, "deq"), "BF16");
    const int64_t differ = compare(eager, deq, c.k).count;
    // The power-of-two globals (n7, n40) make every product exact; the others do not.
    if (std::string(c.name) == "n7_k16" || std::string(c.name) == "n40_k40")
      EXPECT_EQ(differ, 0);
    else
      EXPECT_GT(differ, 0);
  }
}

// The data pins each choice down: the even element in the HIGH nibble, the swizzled
// scale offset, and (for a global that is not a bf16 value) value * (scale * global).
TEST(Nvfp4Golden, WrongNibbleOrderSwizzleOrRoundingOrderMismatch) {
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const QuantLinear q = stored_layer(c);
    const int64_t cols = scale_cols_of(c);
    const auto swz = [cols](int64_t r, int64_t b) { return nvfp4_scale_offset(r, b, cols); };
    const auto row_major = [cols](int64_t r, int64_t b) { return r * cols + b; };
    const std::vector<uint16_t> deq = golden().read_as<uint16_t>(key(c, "deq"), "BF16");
    const std::vector<uint16_t> right =
        decode_variant(q, Nibble::even_high, Order::code_x_scale_global, swz);
    EXPECT_EQ(compare(right, deq, c.k).count, 0);
    const int64_t nibble =
        compare(decode_variant(q, Nibble::even_low, Order::code_x_scale_global, swz), deq, c.k)
            .count;
    EXPECT_GT(nibble, int64_t(deq.size()) / 4) << "even-LOW nibble order";
    if (c.n > 1) {
      const int64_t layout =
          compare(decode_variant(q, Nibble::even_high, Order::code_x_scale_global, row_major), deq,
                  c.k)
              .count;
      EXPECT_GT(layout, 0) << "row-major (unswizzled) scales";
    }
    const int64_t order =
        compare(decode_variant(q, Nibble::even_high, Order::code_global_scale, swz), deq, c.k)
            .count;
    if (c.bf16_master)
      EXPECT_EQ(order, 0) << "a bf16 global makes every fp32 product exact";
    else
      EXPECT_GT(order, 100) << "(value * global) * scale";
  }
}

// (b) Our quantiser on the bf16 master == comfy-kitchen's, bit for bit: global,
// every scale byte (padding included) and every code byte (padding included).
TEST(Nvfp4Golden, QuantiserMatchesComfyKitchenBitForBit) {
  int checked = 0;
  for (const GoldenCase& c : kCases) {
    if (!c.bf16_master) continue;  // an fp32 master: not what our bf16 quantiser sees
    SCOPED_TRACE(c.name);
    const std::vector<uint16_t> w = golden().read_as<uint16_t>(key(c, "w"), "BF16");
    const QuantLinear ours = QuantLinear::from_bf16(w, c.n, c.k, WeightFormat::nvfp4);
    const QuantLinear ck = stored_layer(c);
    EXPECT_EQ(std::bit_cast<uint32_t>(ours.fp4_global), std::bit_cast<uint32_t>(ck.fp4_global))
        << ours.fp4_global << " vs " << ck.fp4_global;
    ASSERT_EQ(ours.fp4_scales.size(), ck.fp4_scales.size());
    ASSERT_EQ(ours.fp4_codes.size(), ck.fp4_codes.size());
    int64_t scales = 0, codes = 0;
    for (size_t i = 0; i < ck.fp4_scales.size(); ++i)
      scales += ours.fp4_scales[i] != ck.fp4_scales[i];
    for (size_t i = 0; i < ck.fp4_codes.size(); ++i) codes += ours.fp4_codes[i] != ck.fp4_codes[i];
    EXPECT_EQ(scales, 0) << "of " << ck.fp4_scales.size() << " scale bytes";
    EXPECT_EQ(codes, 0) << "of " << ck.fp4_codes.size() << " code bytes";
    // And so our own decode of our own quantisation is ComfyUI's dequantisation.
    const std::vector<uint16_t> deq = golden().read_as<uint16_t>(key(c, "deq"), "BF16");
    EXPECT_EQ(compare(ours.w_bf16, deq, c.k).count, 0);
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

// (c) nvfp4_scale_offset is comfy-kitchen's to_blocked: `.swizzle` holds
// to_blocked(idx) for idx[r, b] = r * blocks + b + 1 over the rows and blocks
// comfy-kitchen quantises (padded to 16), and 0 in the padding to 128 x 4.
TEST(Nvfp4Golden, ScaleOffsetMatchesComfyKitchenSwizzle) {
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(c.name);
    const std::vector<int32_t> swz = golden().read_as<int32_t>(key(c, "swizzle"), "I32");
    const int64_t rows = round_up(c.n, 16), blocks = blocks_of(c), cols = scale_cols_of(c);
    ASSERT_EQ(int64_t(swz.size()), round_up(rows, 128) * cols);
    std::vector<int> hit(swz.size(), 0);
    int64_t bad = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t off = nvfp4_scale_offset(r, b, cols);
        ASSERT_GE(off, 0);
        ASSERT_LT(off, int64_t(swz.size()));
        ++hit[size_t(off)];
        if (swz[size_t(off)] != r * blocks + b + 1 && bad++ < 4)
          ADD_FAILURE() << "row " << r << " block " << b << ": offset " << off << " holds "
                        << swz[size_t(off)];
      }
    EXPECT_EQ(bad, 0);
    for (size_t i = 0; i < swz.size(); ++i)
      EXPECT_EQ(hit[i], swz[i] != 0 ? 1 : 0) << "offset " << i;
  }
}

}  // namespace
}  // namespace h3s
