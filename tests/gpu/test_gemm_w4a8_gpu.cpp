// gemm_w4a8 (src/backend/cuda/gemm/gemm_w4a8_sm80.cu): W4A8 weights decoded to
// int8 inside the kernel give the same bits as gemm_i8 on decode_w4a8's int8
// weights, with and without a codebook, for any M, N and K tail, feature
// slice and alignment; its in-kernel decode equals decode_w4a8 for every
// (scale byte, code) pair; and CudaBackend's w4a8 linear layers (which now
// hold only the packed weights) match the CPU backend bit for bit. Skips
// without a CUDA device.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_memory.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/arena.hpp"
#include "core/dtype.hpp"
#include "core/tensor.hpp"
#include "gpu_fixture.hpp"
#include "model/quant_linear.hpp"

namespace h3s {
namespace {

using test::DeviceArray;
using test::gemm_kernel;
using test::sync_check;

// Scale bytes as a checkpoint may hold them: mostly moderate positive e4m3
// values, and some zeros, -0, subnormals, values up to 448 (which clamp) and
// negatives. Never the NaN bytes 0x7f / 0xff (refused by the reader).
std::vector<uint8_t> random_scales(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> kind(0, 15), any(0, 255), moderate(0x20, 0x48);
  std::vector<uint8_t> v(n);
  for (auto& e : v) {
    const int k = kind(rng);
    int b = k < 11 ? moderate(rng) : any(rng);
    if (k == 11) b &= 0x87;  // zero, -0 and subnormals
    if ((b & 0x7f) == 0x7f) b ^= 1;
    e = uint8_t(b);
  }
  return v;
}

// A codebook with exact halves (round-half-even ties at scale 1.0, byte
// 0x38), a large entry (clamps) and uneven levels.
std::vector<float> test_codebook() {
  return {-8.0f, -6.5f, -5.0f, -3.25f, -2.5f, -1.5f, -0.5f, 0.0f,
          0.5f,  1.5f,  2.5f,  3.75f,  5.0f,  6.5f,  7.25f, 100.0f};
}

std::vector<float> default_levels() {
  std::vector<float> l(16);
  for (int c = 0; c < 16; ++c) l[size_t(c)] = float(c - 8);
  return l;
}

template <class T>
int64_t count_bit_diffs(const std::vector<T>& a, const std::vector<T>& b, int64_t rows,
                        int64_t col0, int64_t col1, int64_t ld, std::string* first = nullptr) {
  int64_t diffs = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = col0; c < col1; ++c) {
      const size_t i = size_t(r * ld + c);
      if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
        if (first && diffs < 4) *first += fmt::format(" ({},{})", r, c);
        ++diffs;
      }
    }
  return diffs;
}

// One W4A8 GEMM's inputs: int8 activation rows [m, ldx] with row scales, the
// packed weight (QuantLinear, decoded by decode_w4a8 into w_i8), fp32 row
// scales and bias, on the device in both forms. `offset` shifts the packed
// device arrays off their alignment.
struct W4A8Problem {
  int64_t m, n, k, ldx;
  QuantLinear q;
  std::vector<int8_t> hx;
  std::vector<float> hxs, hbias;
  std::unique_ptr<DeviceArray<int8_t>> x, w_i8;
  std::unique_ptr<DeviceArray<float>> xs, ws, bias, levels;
  std::unique_ptr<DeviceArray<uint8_t>> codes, s_rel;

  W4A8Problem(int64_t m_, int64_t n_, int64_t k_, int64_t ldx_, bool codebook, uint32_t seed,
              size_t offset = 0)
      : m(m_), n(n_), k(k_), ldx(ldx_) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255), act(-128, 127);
    std::uniform_real_distribution<float> log_scale(std::log(1e-5f), std::log(1e-2f));
    q.format = WeightFormat::w4a8;
    q.out = n;
    q.in = k;
    std::vector<uint8_t> packed(static_cast<size_t>(n * k / 2));
    for (auto& c : packed) c = uint8_t(byte(rng));
    q.w4_codes = std::move(packed);
    q.w4_s_rel = random_scales(size_t(n * k / kW4Group), seed + 1);
    if (codebook) q.w4_codebook = test_codebook();
    std::vector<float> row_scales(static_cast<size_t>(n));
    for (auto& s : row_scales) s = std::exp(log_scale(rng));
    q.w_scale = std::move(row_scales);
    decode_w4a8(q);
    hxs.resize(size_t(m));
    for (auto& s : hxs) s = std::exp(log_scale(rng)) * 1e3f;
    hbias.resize(size_t(n));
    std::normal_distribution<float> nd(0.0f, 0.5f);
    for (auto& b : hbias) b = nd(rng);
    // Last, so problems differing only in ldx share every other input.
    hx.resize(size_t(m * ldx));
    for (auto& v : hx) v = int8_t(act(rng));
    if (m > 2) {
      // Extreme rows: the largest |acc| and zeros.
      std::fill_n(hx.begin(), k, int8_t(-128));
      std::fill_n(hx.begin() + ldx, k, int8_t(0));
    }
    x = std::make_unique<DeviceArray<int8_t>>(hx);
    w_i8 = std::make_unique<DeviceArray<int8_t>>(q.w_i8.to_vector());
    xs = std::make_unique<DeviceArray<float>>(hxs);
    ws = std::make_unique<DeviceArray<float>>(q.w_scale.to_vector());
    bias = std::make_unique<DeviceArray<float>>(hbias);
    levels = std::make_unique<DeviceArray<float>>(codebook ? q.w4_codebook.to_vector()
                                                           : default_levels());
    codes = std::make_unique<DeviceArray<uint8_t>>(q.w4_codes.to_vector(), offset);
    s_rel = std::make_unique<DeviceArray<uint8_t>>(q.w4_s_rel.to_vector(), offset);
  }

  // Rows [r0, r0 + rows), output features [f0, f1) into y (row stride ldy,
  // column f0 at y + f0), as CudaBackend slices them; `want` picks the
  // pipeline (sm80: two stages).
  void run_w4a8(int64_t r0, int64_t rows, uint16_t* y, int64_t ldy, bool with_bias, int64_t f0,
                int64_t f1, GemmKernel want = gemm_kernel()) const {
    cuda::gemm_w4a8(x->get() + r0 * ldx, ldx, xs->get() + r0, codes->get() + f0 * (k / 2),
                    s_rel->get() + f0 * (k / kW4Group), levels->get(), ws->get() + f0,
                    with_bias ? bias->get() + f0 : nullptr, y + r0 * ldy + f0, ldy, rows, f1 - f0,
                    k, want, nullptr);
    sync_check("gemm_w4a8");
  }
  void run_i8(int64_t r0, int64_t rows, uint16_t* y, int64_t ldy, bool with_bias, int64_t f0,
              int64_t f1) const {
    cuda::gemm_i8(x->get() + r0 * ldx, ldx, xs->get() + r0, w_i8->get() + f0 * k, ws->get() + f0,
                  with_bias ? bias->get() + f0 : nullptr, y + r0 * ldy + f0, ldy, rows, f1 - f0, k,
                  gemm_kernel(), nullptr);
    sync_check("gemm_i8");
  }
};

// gemm_w4a8 and gemm_i8 (decoded weights) over all rows and features
// [f0, f1); unwritten outputs start as different sentinels, so a missed
// store shows as a difference.
void expect_same_as_i8(const W4A8Problem& p, bool with_bias, int64_t f0, int64_t f1,
                       GemmKernel kernel = gemm_kernel()) {
  const int64_t ldy = p.n + 8;
  DeviceArray<uint16_t> got(size_t(p.m * ldy)), want(size_t(p.m * ldy));
  got.fill_bytes(0x55);
  want.fill_bytes(0x7f);
  p.run_w4a8(0, p.m, got.get(), ldy, with_bias, f0, f1, kernel);
  p.run_i8(0, p.m, want.get(), ldy, with_bias, f0, f1);
  std::string where;
  EXPECT_EQ(count_bit_diffs(got.download(), want.download(), p.m, f0, f1, ldy, &where), 0)
      << "m=" << p.m << " n=" << p.n << " k=" << p.k << " features [" << f0 << ", " << f1
      << ") differing at" << where;
}

class GpuGemmW4A8 : public ::testing::Test {
 protected:
  void SetUp() override { H3S_REQUIRE_GPU(); }
};

// M = 1, 64, 259, 700 (tails of the 128-row tile) at the test shape, the real
// K = 5376, an N tail with K = 288 (not a whole 128-column K-tile) and K
// below one K-tile; with and without the codebook, with and without bias.
TEST_F(GpuGemmW4A8, MatchesI8OnDecodedWeights) {
  struct Case {
    int64_t m, n, k, ldx;
  };
  for (const bool codebook : {false, true})
    for (const Case& c : {Case{1, 768, 512, 512}, Case{64, 768, 512, 512}, Case{259, 768, 512, 512},
                          Case{700, 768, 512, 512}, Case{37, 1536, 5376, 5376},
                          Case{263, 100, 288, 320}, Case{5, 200, 96, 96}, Case{130, 257, 32, 48}}) {
      SCOPED_TRACE(
          fmt::format("m={} n={} k={} ldx={} codebook={}", c.m, c.n, c.k, c.ldx, codebook));
      const W4A8Problem p(c.m, c.n, c.k, c.ldx, codebook, uint32_t(c.m * 7 + c.k + codebook));
      expect_same_as_i8(p, true, 0, c.n);
      expect_same_as_i8(p, false, 0, c.n);
    }
}

// The two-stage pipeline (GemmKernel::sm80; what cards with 99 KiB of shared
// memory a block run: sm_86, sm_89) gives the default's bits (three stages
// where a block may take 112 KiB: Hopper, A100), and gemm_i8's on the
// decoded weights.
TEST_F(GpuGemmW4A8, TwoStagePipelineGivesTheThreeStagesBits) {
  struct Case {
    int64_t m, n, k, ldx;
  };
  for (const bool codebook : {false, true})
    for (const Case& c :
         {Case{1, 768, 512, 512}, Case{259, 768, 512, 512}, Case{37, 1536, 5376, 5376},
          Case{263, 100, 288, 320}, Case{130, 257, 32, 48}}) {
      SCOPED_TRACE(
          fmt::format("m={} n={} k={} ldx={} codebook={}", c.m, c.n, c.k, c.ldx, codebook));
      const W4A8Problem p(c.m, c.n, c.k, c.ldx, codebook, uint32_t(c.m * 5 + c.k + codebook));
      const int64_t ldy = p.n;
      DeviceArray<uint16_t> three(size_t(p.m * ldy)), two(size_t(p.m * ldy));
      p.run_w4a8(0, p.m, three.get(), ldy, true, 0, p.n, GemmKernel::automatic);
      two.fill_bytes(0x55);
      p.run_w4a8(0, p.m, two.get(), ldy, true, 0, p.n, GemmKernel::sm80);
      expect_same_as_i8(p, true, 0, p.n, GemmKernel::sm80);
      EXPECT_EQ(count_bit_diffs(two.download(), three.download(), p.m, 0, p.n, ldy), 0);
    }
}

// Chunks of rows (straddling the 128-row tile at varying offsets) and single
// rows give the bits of the full call.
TEST_F(GpuGemmW4A8, RowInvariant) {
  const std::vector<int64_t> chunks = {1, 7, 128, 129, 64, 3, 300};
  for (const bool codebook : {false, true})
    for (const int64_t k : {512, 288}) {
      SCOPED_TRACE(fmt::format("k={} codebook={}", k, codebook));
      const W4A8Problem p(700, 300, k, k, codebook, uint32_t(91 + k));
      const int64_t ldy = p.n;
      DeviceArray<uint16_t> full(size_t(p.m * ldy)), part(size_t(p.m * ldy));
      p.run_w4a8(0, p.m, full.get(), ldy, true, 0, p.n);
      const std::vector<uint16_t> want = full.download();
      part.fill_bytes(0x55);
      for (int64_t r0 = 0, i = 0; r0 < p.m; ++i) {
        const int64_t rows = std::min(chunks[size_t(i) % chunks.size()], p.m - r0);
        p.run_w4a8(r0, rows, part.get(), ldy, true, 0, p.n);
        r0 += rows;
      }
      EXPECT_EQ(count_bit_diffs(part.download(), want, p.m, 0, p.n, ldy), 0) << "chunked";
      part.fill_bytes(0x55);
      for (int64_t r = 0; r < p.m; ++r) p.run_w4a8(r, 1, part.get(), ldy, true, 0, p.n);
      EXPECT_EQ(count_bit_diffs(part.download(), want, p.m, 0, p.n, ldy), 0) << "row by row";
    }
}

// Features [f0, f1) (linear's `features`, CudaBackend's Q/K/V slices): rows
// f0.. of every packed array. An odd f0 misaligns the bf16 pair stores, and at
// K = 288 the scale rows (18 bytes) leave 4-byte alignment: the byte-gather
// path. Same bits as gemm_i8's slice and as the full product's columns.
TEST_F(GpuGemmW4A8, FeatureSlicesMatchI8AndFullProduct) {
  for (const bool codebook : {false, true})
    for (const int64_t k : {512, 288}) {
      SCOPED_TRACE(fmt::format("k={} codebook={}", k, codebook));
      const W4A8Problem p(131, 768, k, k, codebook, uint32_t(41 + k));
      for (const auto& [f0, f1] : {std::pair<int64_t, int64_t>{5, 765}, {128, 256}, {0, 1}}) {
        expect_same_as_i8(p, true, f0, f1);
        const int64_t ldy = p.n;
        DeviceArray<uint16_t> full(size_t(p.m * ldy)), part(size_t(p.m * ldy));
        p.run_w4a8(0, p.m, full.get(), ldy, true, 0, p.n);
        part.fill_bytes(0);
        p.run_w4a8(0, p.m, part.get(), ldy, true, f0, f1);
        EXPECT_EQ(count_bit_diffs(part.download(), full.download(), p.m, f0, f1, ldy), 0)
            << "features [" << f0 << ", " << f1 << ")";
      }
    }
}

// Packed arrays off their cp.async alignment (codes and scales one byte in)
// and activation rows off 16 bytes take byte-gather copies: same bits.
TEST_F(GpuGemmW4A8, UnalignedOperandsMatchAligned) {
  const int64_t m = 259, n = 300, k = 512;
  const W4A8Problem aligned(m, n, k, k, true, 33);
  const W4A8Problem odd(m, n, k, k, true, 33, 1);
  W4A8Problem odd_x(m, n, k, k + 3, true, 33);
  std::vector<int8_t> hx(size_t(m * (k + 3)));
  for (int64_t r = 0; r < m; ++r)
    std::copy_n(aligned.hx.begin() + r * k, k, hx.begin() + r * (k + 3));
  odd_x.hx = hx;
  odd_x.x = std::make_unique<DeviceArray<int8_t>>(hx);
  DeviceArray<uint16_t> ya(size_t(m * n)), yo(size_t(m * n)), yx(size_t(m * n));
  aligned.run_w4a8(0, m, ya.get(), n, true, 0, n);
  odd.run_w4a8(0, m, yo.get(), n, true, 0, n);
  odd_x.run_w4a8(0, m, yx.get(), n, true, 0, n);
  const std::vector<uint16_t> want = ya.download();
  EXPECT_EQ(count_bit_diffs(yo.download(), want, m, 0, n, n), 0) << "packed weights off alignment";
  EXPECT_EQ(count_bit_diffs(yx.download(), want, m, 0, n, n), 0) << "activation rows off alignment";
}

// The decode itself, entry by entry: with x = the identity (xs = ws = 1, no
// bias) row i of y is column i of the decoded weight, exact in bf16. The 256
// rows x 16 groups cover every scale byte with every code (the NaN bytes map
// to their neighbours), with and without the codebook.
TEST_F(GpuGemmW4A8, DecodeEqualsDecodeW4a8ForEveryScaleAndCode) {
  constexpr int64_t n = 256, k = 256, groups = k / kW4Group;
  for (const bool codebook : {false, true}) {
    SCOPED_TRACE(fmt::format("codebook={}", codebook));
    QuantLinear q;
    q.format = WeightFormat::w4a8;
    q.out = n;
    q.in = k;
    std::vector<uint8_t> packed(size_t(n * k / 2), 0), scales(size_t(n * groups));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t g = 0; g < groups; ++g) {
        uint8_t s = uint8_t((r * groups + g) % 256);
        if ((s & 0x7f) == 0x7f) s ^= 1;
        scales[size_t(r * groups + g)] = s;
        for (int64_t j = 0; j < kW4Group; ++j) {
          const int64_t col = g * kW4Group + j;
          const uint8_t code = uint8_t((j * 7 + r) % 16);  // every code once per group
          uint8_t& b = packed[size_t(r * (k / 2) + col / 2)];
          b = uint8_t(col % 2 == 0 ? (b & 0xf0) | code : (b & 0x0f) | (code << 4));
        }
      }
    q.w4_codes = std::move(packed);
    q.w4_s_rel = std::move(scales);
    if (codebook) q.w4_codebook = test_codebook();
    decode_w4a8(q);

    std::vector<int8_t> eye(size_t(k * k), 0);
    for (int64_t i = 0; i < k; ++i) eye[size_t(i * k + i)] = 1;
    const DeviceArray<int8_t> x(eye);
    const DeviceArray<float> ones(std::vector<float>(size_t(n), 1.0f));
    const DeviceArray<float> levels(codebook ? q.w4_codebook.to_vector() : default_levels());
    const DeviceArray<uint8_t> codes(q.w4_codes.to_vector()), s_rel(q.w4_s_rel.to_vector());
    DeviceArray<uint16_t> y(size_t(k * n));
    cuda::gemm_w4a8(x.get(), k, ones.get(), codes.get(), s_rel.get(), levels.get(), ones.get(),
                    nullptr, y.get(), n, k, n, k, gemm_kernel(), nullptr);
    sync_check("gemm_w4a8 identity");
    const std::vector<uint16_t> got = y.download();
    int64_t bad = 0;
    std::string where;
    for (int64_t i = 0; i < k; ++i)
      for (int64_t r = 0; r < n; ++r) {
        const float want = float(q.w_i8[size_t(r * k + i)]);
        if (bf16_to_f32(bf16{got[size_t(i * n + r)]}) != want) {
          if (bad < 4) where += fmt::format(" (row {}, col {})", r, i);
          ++bad;
        }
      }
    EXPECT_EQ(bad, 0) << "decoded weights differ at" << where;
  }
}

// ---- CudaBackend: w4a8 layers through gemm_w4a8 ------------------------------

class GpuW4A8Backend : public test::GpuBackendTest {
 protected:
  // A bf16 host matrix [rows, cols] on the device.
  Buffer to_device(const std::vector<uint16_t>& h, int64_t rows, int64_t cols, Tensor* t) {
    Buffer b = arena_->allocate(h.size() * 2, "test matrix");
    *t = Tensor::contiguous(b.data(), DType::bf16, {rows, cols}, Device::cuda);
    gpu_->upload(h.data(), *t);
    return b;
  }
};

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float sd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = f32_to_bf16(d(rng)).bits;
  return v;
}

// A w4a8 layer quantised from bf16, optionally with a codebook (then decoded
// again, as the checkpoint reader does), and a bias.
QuantLinear w4a8_layer(int64_t n, int64_t k, bool codebook, uint32_t seed) {
  QuantLinear w =
      QuantLinear::from_bf16(random_bf16(size_t(n * k), seed, 0.05f), n, k, WeightFormat::w4a8);
  if (codebook) {
    w.w4_codebook = test_codebook();
    decode_w4a8(w);
  }
  std::vector<float> bias(static_cast<size_t>(n));
  std::mt19937 rng(seed + 1);
  std::normal_distribution<float> d(0.0f, 0.1f);
  for (float& b : bias) b = bf16_to_f32(f32_to_bf16(d(rng)));
  w.bias = std::move(bias);
  return w;
}

// linear (full and sliced features) and swiglu_linear equal the CPU backend,
// which multiplies decode_w4a8's int8 weights; the device holds only the
// packed weight (well under the int8 bytes).
TEST_F(GpuW4A8Backend, LinearAndSwigluMatchCpuWithPackedWeights) {
  constexpr int64_t kIn = 512, kOut = 384;
  for (const bool codebook : {false, true}) {
    SCOPED_TRACE(fmt::format("codebook={}", codebook));
    const QuantLinear w = w4a8_layer(kOut, kIn, codebook, 7 + codebook);
    for (const int64_t m : {1, 64, 259})
      for (const RowRange feat : {RowRange{0, kOut}, RowRange{128, 256}, RowRange{5, 300}}) {
        SCOPED_TRACE(fmt::format("linear m={} features [{}, {})", m, feat.begin, feat.end));
        const std::vector<uint16_t> hx = random_bf16(size_t(m * kIn), uint32_t(m), 1.0f);
        std::vector<uint16_t> want(size_t(m * feat.size())), got(want.size(), 0x7fff);
        std::vector<uint16_t> x_copy = hx;
        cpu_->linear(Tensor::contiguous(x_copy.data(), DType::bf16, {m, kIn}), w,
                     Tensor::contiguous(want.data(), DType::bf16, {m, feat.size()}), feat);
        Tensor dx, dy;
        const Buffer bx = to_device(hx, m, kIn, &dx);
        const Buffer by = to_device(got, m, feat.size(), &dy);
        gpu_->linear(dx, on_gpu(w), dy, feat);
        gpu_->download(dy, got.data());
        EXPECT_EQ(count_bit_diffs(got, want, m, 0, feat.size(), feat.size()), 0);
      }
    for (const int64_t m : {1, 130}) {
      SCOPED_TRACE(fmt::format("swiglu_linear m={}", m));
      std::vector<uint16_t> hf = random_bf16(size_t(m * 2 * kIn), uint32_t(100 + m), 2.0f);
      std::vector<uint16_t> want(size_t(m * kOut)), got(want.size(), 0x7fff);
      cpu_->swiglu_linear(Tensor::contiguous(hf.data(), DType::bf16, {m, 2 * kIn}), w,
                          Tensor::contiguous(want.data(), DType::bf16, {m, kOut}));
      Tensor df, dy;
      const Buffer bf = to_device(hf, m, 2 * kIn, &df);
      const Buffer by = to_device(got, m, kOut, &dy);
      gpu_->swiglu_linear(df, on_gpu(w), dy);
      gpu_->download(dy, got.data());
      EXPECT_EQ(count_bit_diffs(got, want, m, 0, kOut, kOut), 0);
    }
    // codes (in / 2) + scales (in / 16) + levels + row scales + bias, each array
    // 256-byte aligned in the store; no int8 decode on the device.
    const size_t packed = WeightStore::aligned(kOut * kIn / 2) +
                          WeightStore::aligned(kOut * kIn / kW4Group) +
                          WeightStore::aligned(16 * 4) + 2 * WeightStore::aligned(kOut * 4);
    EXPECT_EQ(gpu_->prepared_bytes(w, Residency::resident), packed);
    const std::unique_ptr<WeightStore> store = gpu_->make_weight_store("one layer", 0);
    const QuantLinear p = gpu_->prepare(w, Residency::resident, *store);
    EXPECT_EQ(store->bytes(), packed);
    EXPECT_TRUE(p.w_i8.empty());
    EXPECT_EQ(p.w4_codes.device(), Device::cuda);
    gpu_->synchronize();
  }
}

// A w4a8 layer without its packed arrays is refused by name, not read.
TEST_F(GpuW4A8Backend, MissingPackedArraysAreRefused) {
  QuantLinear w = w4a8_layer(64, 256, false, 3);
  std::vector<uint16_t> hx(256, 0);
  Tensor dx, dy;
  const Buffer bx = to_device(hx, 1, 256, &dx);
  const Buffer by = to_device(std::vector<uint16_t>(64, 0), 1, 64, &dy);
  // Host weights that did not go through prepare are refused by name.
  try {
    gpu_->linear(dx, w, dy);
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("prepare it for this backend"), std::string::npos)
        << e.what();
  }
  w.w4_codes = WeightArray<uint8_t>{};
  try {
    gpu_->linear(dx, on_gpu(w), dy);
    ADD_FAILURE() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("w4a8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3s
