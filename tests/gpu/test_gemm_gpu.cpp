// GPU GEMMs (src/backend/cuda/gemm): row invariance bit for bit, gemm_i8
// bit-exact against an int32 CPU reference and comfy-kitchen's golden vectors,
// gemm_bf16 and gemm_f32 against fp64 and the CPU backend. Skips without a
// CUDA device.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/dtype.hpp"
#include "core/tensor.hpp"
#include "deviation.hpp"
#include "gpu_fixture.hpp"
#include "model/quant_linear.hpp"
#include "model/safetensors.hpp"
#include "ops/golden_file.hpp"

namespace h3s {
namespace {

using test::DeviceArray;
using test::gemm_kernel;
using test::sync_check;

// ---- host data ----------------------------------------------------------------

std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<uint16_t> v(n);
  for (auto& e : v) e = f32_to_bf16(d(rng)).bits;
  return v;
}

std::vector<float> random_f32(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

std::vector<int8_t> random_i8(size_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int8_t> v(n);
  for (auto& e : v) e = static_cast<int8_t>(d(rng));
  return v;
}

std::vector<float> random_scales(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(std::log(lo), std::log(hi));
  std::vector<float> v(n);
  for (auto& e : v) e = std::exp(d(rng));
  return v;
}

float bf16f(uint16_t b) {
  return bf16_to_f32(bf16{b});
}

// Relative RMS, the worst row and the largest single error (deviation.hpp), printed as the
// "[ deviation ]" lines the bounds were set from.
template <class G>
void check_deviation(const std::string& check, const std::vector<G>& got,
                     const std::vector<double>& want, int64_t rows, int64_t cols,
                     const test::DeviationBound& bound) {
  auto value = [&](int64_t r, int64_t c) {
    const size_t i = size_t(r * cols + c);
    if constexpr (std::is_same_v<G, uint16_t>)
      return double(bf16f(got[i]));
    else
      return double(got[i]);
  };
  const test::Deviation d = test::measure_deviation(
      rows, cols, value, [&](int64_t r, int64_t c) { return want[size_t(r * cols + c)]; });
  std::cout << "[ deviation ] " << check << " | " << rows << "x" << cols << " | " << d.describe()
            << "\n";
  test::expect_within(d, bound, check);
}

// Measured on the H200 (2026-12-01): bf16 vs fp64 (4 cases; the output's own bf16 rounding)
// rel-rms 1.69e-3, worst row 1.92e-3, largest 0.0125 of the RMS; bf16 vs the CPU backend
// 2.88e-5 / 2.37e-4 / 6.31e-3; f32 vs fp64 (6 cases) 1.32e-6 / 1.90e-6 / 1.01e-5. Bounds: 2x.
constexpr test::DeviationBound kGemmBf16VsFp64{3.4e-3, 3.9e-3, 0.025};
constexpr test::DeviationBound kGemmBf16VsCpu{5.8e-5, 4.8e-4, 0.013};
constexpr test::DeviationBound kGemmF32Bound{2.7e-6, 3.8e-6, 2.1e-5};

// Elements whose bits differ between two row-major [rows, width] arrays with
// the given row strides; the first few are described in `first`.
template <class T>
int64_t count_bit_diffs(const std::vector<T>& a, const std::vector<T>& b, int64_t rows,
                        int64_t width, int64_t ld, std::string* first = nullptr) {
  int64_t diffs = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) {
      const size_t i = size_t(r * ld + c);
      if (std::memcmp(&a[i], &b[i], sizeof(T)) != 0) {
        if (first && diffs < 4) *first += fmt::format(" ({},{})", r, c);
        ++diffs;
      }
    }
  return diffs;
}

// ---- problems: one GEMM's inputs on the device, callable on any row range ----

// Each problem owns x [m, ldx], w [n, k], bias [n] (and scales); run() computes
// rows [r0, r0 + rows) of y by offsetting the row pointers, as the chunked
// executor does.
struct Bf16Problem {
  using Out = uint16_t;
  int64_t m, n, k, ldx;
  std::vector<uint16_t> hx, hw;
  std::vector<float> hbias;
  DeviceArray<uint16_t> x, w;
  DeviceArray<float> bias;
  Bf16Problem(int64_t m_, int64_t n_, int64_t k_, int64_t ldx_, uint32_t seed)
      : m(m_),
        n(n_),
        k(k_),
        ldx(ldx_),
        hx(random_bf16(size_t(m_ * ldx_), seed)),
        hw(random_bf16(size_t(n_ * k_), seed + 1, 0.05f)),
        hbias(random_f32(size_t(n_), seed + 2, 0.5f)),
        x(hx),
        w(hw),
        bias(hbias) {}
  void run(int64_t r0, int64_t rows, Out* y, int64_t ldy, bool with_bias = true) const {
    cuda::gemm_bf16(x.get() + r0 * ldx, ldx, w.get(), with_bias ? bias.get() : nullptr,
                    y + r0 * ldy, ldy, rows, n, k, gemm_kernel(), nullptr);
    sync_check("gemm_bf16");
  }
};

struct I8Problem {
  using Out = uint16_t;
  int64_t m, n, k, ldx;
  std::vector<int8_t> hx, hw;
  std::vector<float> hxs, hws, hbias;
  DeviceArray<int8_t> x, w;
  DeviceArray<float> xs, ws, bias;
  GemmKernel kernel = gemm_kernel();  // the suite's, or the kernel a test compares
  I8Problem(int64_t m_, int64_t n_, int64_t k_, int64_t ldx_, uint32_t seed)
      : m(m_),
        n(n_),
        k(k_),
        ldx(ldx_),
        hx(random_i8(size_t(m_ * ldx_), seed, -128, 127)),
        hw(random_i8(size_t(n_ * k_), seed + 1, -127, 127)),
        hxs(random_scales(size_t(m_), seed + 2, 1e-4f, 1e2f)),
        hws(random_scales(size_t(n_), seed + 3, 1e-5f, 1e-2f)),
        hbias(random_f32(size_t(n_), seed + 4, 0.5f)),
        x(hx),
        w(hw),
        xs(hxs),
        ws(hws),
        bias(hbias) {}
  void run(int64_t r0, int64_t rows, Out* y, int64_t ldy, bool with_bias = true) const {
    cuda::gemm_i8(x.get() + r0 * ldx, ldx, xs.get() + r0, w.get(), ws.get(),
                  with_bias ? bias.get() : nullptr, y + r0 * ldy, ldy, rows, n, k, kernel, nullptr);
    sync_check("gemm_i8");
  }
  // The CPU reference: exact int32 dot, then bf16((float(acc) * xs) * ws) (+ bias).
  std::vector<uint16_t> reference(bool with_bias) const {
    std::vector<uint16_t> y(size_t(m * n));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < n; ++c) {
        int32_t acc = 0;
        for (int64_t i = 0; i < k; ++i)
          acc += int32_t(hx[size_t(r * ldx + i)]) * int32_t(hw[size_t(c * k + i)]);
        float v = (float(acc) * hxs[size_t(r)]) * hws[size_t(c)];
        if (with_bias) v += hbias[size_t(c)];
        y[size_t(r * n + c)] = f32_to_bf16(v).bits;
      }
    return y;
  }
};

struct F32Problem {
  using Out = float;
  int64_t m, n, k, ldx;
  std::vector<float> hx, hw, hbias;
  DeviceArray<float> x, w, bias;
  F32Problem(int64_t m_, int64_t n_, int64_t k_, int64_t ldx_, uint32_t seed)
      : m(m_),
        n(n_),
        k(k_),
        ldx(ldx_),
        hx(random_f32(size_t(m_ * ldx_), seed)),
        hw(random_f32(size_t(n_ * k_), seed + 1, 0.05f)),
        hbias(random_f32(size_t(n_), seed + 2, 0.5f)),
        x(hx),
        w(hw),
        bias(hbias) {}
  void run(int64_t r0, int64_t rows, Out* y, int64_t ldy, bool with_bias = true) const {
    cuda::gemm_f32(x.get() + r0 * ldx, ldx, w.get(), with_bias ? bias.get() : nullptr, y + r0 * ldy,
                   ldy, rows, n, k, nullptr);
    sync_check("gemm_f32");
  }
};

// fp64 reference of a float-valued problem: sum_k x w (+ bias).
template <class P, class Conv>
std::vector<double> fp64_reference(const P& p, Conv to_double, bool with_bias) {
  std::vector<double> y(size_t(p.m * p.n));
  std::vector<double> wd(p.hw.size());
  for (size_t i = 0; i < wd.size(); ++i) wd[i] = to_double(p.hw[i]);
  std::vector<double> xr(size_t(p.k));
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t i = 0; i < p.k; ++i) xr[size_t(i)] = to_double(p.hx[size_t(r * p.ldx + i)]);
    for (int64_t c = 0; c < p.n; ++c) {
      const double* wr = wd.data() + c * p.k;
      double s = 0.0;
      for (int64_t i = 0; i < p.k; ++i) s += xr[size_t(i)] * wr[i];
      y[size_t(r * p.n + c)] = with_bias ? s + double(p.hbias[size_t(c)]) : s;
    }
  }
  return y;
}

// ---- row invariance ---------------------------------------------------------

// All m rows in one call, then the same rows in chunks of the given sizes
// (cycled), and for small m one row at a time: every chunking gives the same
// bits. y has a row stride wider than n so strided output is covered too.
template <class P>
void expect_row_invariant(const P& p, const std::vector<int64_t>& chunks) {
  using Out = typename P::Out;
  const int64_t ldy = p.n + 8;
  const size_t elems = size_t(p.m * ldy);
  DeviceArray<Out> full(elems), part(elems);
  full.fill_bytes(0x7f);
  p.run(0, p.m, full.get(), ldy);
  const std::vector<Out> want = full.download();

  auto check = [&](const char* how) {
    std::string where;
    const int64_t d = count_bit_diffs(part.download(), want, p.m, p.n, ldy, &where);
    EXPECT_EQ(d, 0) << how << ": m=" << p.m << " n=" << p.n << " k=" << p.k
                    << " differing elements at" << where;
  };
  part.fill_bytes(0x55);
  for (int64_t r0 = 0, i = 0; r0 < p.m; ++i) {
    const int64_t rows = std::min(chunks[size_t(i) % chunks.size()], p.m - r0);
    p.run(r0, rows, part.get(), ldy);
    r0 += rows;
  }
  check("chunked");
  if (p.m <= 700) {
    part.fill_bytes(0x55);
    for (int64_t r = 0; r < p.m; ++r) p.run(r, 1, part.get(), ldy);
    check("row by row");
  }
}

// Chunk sizes straddling tile boundaries (128 rows) at varying offsets.
const std::vector<int64_t> kChunks = {1, 7, 128, 129, 64, 3, 300, 1000, 4093};

template <class P>
void row_invariance_suite() {
  for (int64_t m : {1, 64, 259, 700, 16384}) {
    SCOPED_TRACE(fmt::format("m={} k=512 n=768", m));
    expect_row_invariant(P(m, 768, 512, 512, 11), kChunks);
  }
  for (int64_t m : {1, 259}) {
    SCOPED_TRACE(fmt::format("m={} k=5376 n=1536", m));
    expect_row_invariant(P(m, 1536, 5376, 5376, 12), kChunks);
  }
}

class GpuGemm : public ::testing::Test {
 protected:
  void SetUp() override { H3S_REQUIRE_GPU(); }
};

TEST_F(GpuGemm, Bf16RowInvariant) {
  row_invariance_suite<Bf16Problem>();
}
TEST_F(GpuGemm, I8RowInvariant) {
  row_invariance_suite<I8Problem>();
}
TEST_F(GpuGemm, F32RowInvariant) {
  row_invariance_suite<F32Problem>();
  // The fp32 islands' real shapes: heads N = 96 / 32 at K = 5376, patch
  // embeds K = 96 / 32.
  expect_row_invariant(F32Problem(259, 96, 5376, 5376, 13), kChunks);
  expect_row_invariant(F32Problem(131, 32, 5376, 5376, 14), kChunks);
  expect_row_invariant(F32Problem(259, 5376, 96, 96, 15), kChunks);
  expect_row_invariant(F32Problem(67, 5376, 32, 32, 16), kChunks);
}

// Tails: N not a multiple of the 128-wide tile (nor of 16), strided x.
TEST_F(GpuGemm, RowInvariantWithTails) {
  expect_row_invariant(Bf16Problem(263, 100, 272, 280, 21), kChunks);
  expect_row_invariant(I8Problem(263, 100, 288, 320, 22), kChunks);
  expect_row_invariant(F32Problem(263, 100, 37, 41, 23), kChunks);
}

// x rows off 16-byte boundaries take the byte-gather copy instead of
// cp.async; the shared tile and the arithmetic are the same, so the bits are.
TEST_F(GpuGemm, UnalignedRowsMatchAligned) {
  const int64_t m = 259, n = 768, k = 512;
  {
    Bf16Problem aligned(m, n, k, k, 31);
    Bf16Problem odd(m, n, k, k + 1, 31);  // same values, row stride k + 1
    for (int64_t r = 0; r < m; ++r)
      std::copy_n(aligned.hx.begin() + r * k, k, odd.hx.begin() + r * (k + 1));
    odd.x.upload(odd.hx);
    DeviceArray<uint16_t> ya(size_t(m * n)), yo(size_t(m * n));
    aligned.run(0, m, ya.get(), n);
    odd.run(0, m, yo.get(), n);
    EXPECT_EQ(count_bit_diffs(yo.download(), ya.download(), m, n, n), 0);
    expect_row_invariant(odd, kChunks);  // chunk pointers alternate in alignment
  }
  {
    I8Problem aligned(m, n, k, k, 32);
    I8Problem odd(m, n, k, k + 3, 32);
    for (int64_t r = 0; r < m; ++r)
      std::copy_n(aligned.hx.begin() + r * k, k, odd.hx.begin() + r * (k + 3));
    odd.x.upload(odd.hx);
    DeviceArray<uint16_t> ya(size_t(m * n)), yo(size_t(m * n));
    aligned.run(0, m, ya.get(), n);
    odd.run(0, m, yo.get(), n);
    EXPECT_EQ(count_bit_diffs(yo.download(), ya.download(), m, n, n), 0);
  }
}

// Selecting output features [f0, f1) (linear's `features`) is w + f0 * k,
// bias + f0 and y + f0: the same bits as those columns of the full product,
// including an odd f0 (misaligned bf16 pair stores).
TEST_F(GpuGemm, FeatureSlicesMatchFullProduct) {
  const int64_t m = 131, n = 768, k = 512, f0 = 5, f1 = n - 3, ldy = n;
  {
    Bf16Problem p(m, n, k, k, 41);
    DeviceArray<uint16_t> full(size_t(m * ldy)), part(size_t(m * ldy));
    p.run(0, m, full.get(), ldy);
    part.fill_bytes(0);
    cuda::gemm_bf16(p.x.get(), k, p.w.get() + f0 * k, p.bias.get() + f0, part.get() + f0, ldy, m,
                    f1 - f0, k, gemm_kernel(), nullptr);
    sync_check("gemm_bf16 slice");
    const auto a = full.download(), b = part.download();
    int64_t d = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = f0; c < f1; ++c) d += a[size_t(r * ldy + c)] != b[size_t(r * ldy + c)];
    EXPECT_EQ(d, 0);
  }
  {
    I8Problem p(m, n, k, k, 42);
    DeviceArray<uint16_t> full(size_t(m * ldy)), part(size_t(m * ldy));
    p.run(0, m, full.get(), ldy);
    part.fill_bytes(0);
    cuda::gemm_i8(p.x.get(), k, p.xs.get(), p.w.get() + f0 * k, p.ws.get() + f0, p.bias.get() + f0,
                  part.get() + f0, ldy, m, f1 - f0, k, gemm_kernel(), nullptr);
    sync_check("gemm_i8 slice");
    const auto a = full.download(), b = part.download();
    int64_t d = 0;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = f0; c < f1; ++c) d += a[size_t(r * ldy + c)] != b[size_t(r * ldy + c)];
    EXPECT_EQ(d, 0);
  }
}

// ---- gemm_i8: bit-exact ---------------------------------------------------------

TEST_F(GpuGemm, I8MatchesInt32Reference) {
  struct Case {
    int64_t m, n, k;
    bool bias;
  };
  for (const Case& c :
       {Case{259, 768, 512, true}, Case{259, 768, 512, false}, Case{37, 1536, 5376, false},
        Case{5, 100, 256, true}, Case{1, 768, 512, false}}) {
    SCOPED_TRACE(fmt::format("m={} n={} k={}{}", c.m, c.n, c.k, c.bias ? " bias" : ""));
    I8Problem p(c.m, c.n, c.k, c.k, 51);
    if (c.m > 2) {
      // Extreme rows: the largest |acc| (all -128 against +-127) and zeros.
      std::fill_n(p.hx.begin(), c.k, int8_t(-128));
      std::fill_n(p.hx.begin() + c.k, c.k, int8_t(0));
      p.x.upload(p.hx);
    }
    DeviceArray<uint16_t> y(size_t(c.m * c.n));
    p.run(0, c.m, y.get(), c.n, c.bias);
    std::string where;
    EXPECT_EQ(count_bit_diffs(y.download(), p.reference(c.bias), c.m, c.n, c.n, &where), 0)
        << "differing at" << where;
  }
}

// Both gemm_i8 kernels (mma.sync, and on Hopper the wgmma pipeline of
// gemm_i8_sm90.cu; GemmKernel sm80 and default) give the int32 reference's
// bits and are row-invariant: 1 row, prime row counts, N tails, a K tail
// (288 = two 128-byte K-tiles and a quarter), a deep K (more K-tiles than the
// pipeline holds), x rows off 16-byte boundaries, with and without bias.
TEST_F(GpuGemm, EachI8KernelMatchesInt32Reference) {
  struct Case {
    int64_t m, n, k, ldx;
    bool bias;
  };
  uint32_t seed = 600;
  for (const GemmKernel kernel : {GemmKernel::sm80, GemmKernel::automatic}) {
    const std::string name(gemm_kernel_name(kernel));
    for (const Case& c : {Case{1, 768, 512, 512, true}, Case{131, 100, 288, 288, true},
                          Case{263, 1536, 5376, 5376, false}, Case{37, 300, 1024, 1027, true},
                          Case{700, 256, 128, 128, false}}) {
      SCOPED_TRACE(fmt::format("{}: m={} n={} k={} ldx={}{}", name, c.m, c.n, c.k, c.ldx,
                               c.bias ? " bias" : ""));
      I8Problem p(c.m, c.n, c.k, c.ldx, ++seed);
      p.kernel = kernel;
      DeviceArray<uint16_t> y(size_t(c.m * c.n));
      p.run(0, c.m, y.get(), c.n, c.bias);
      std::string where;
      EXPECT_EQ(count_bit_diffs(y.download(), p.reference(c.bias), c.m, c.n, c.n, &where), 0)
          << "differing at" << where;
    }
    SCOPED_TRACE(name);
    I8Problem p(259, 300, 288, 291, ++seed);
    p.kernel = kernel;
    expect_row_invariant(p, kChunks);
  }
}

// comfy-kitchen's int8 ConvRot linear (tests/data/golden/README.md): the same
// xq / xs through gemm_i8 reproduce its bf16 output bit for bit.
TEST_F(GpuGemm, I8MatchesGolden) {
  const SafetensorsFile f = SafetensorsFile::open(test::golden_path("ck_int8_linear"));
  const int64_t n = 768, k = 512;
  ASSERT_EQ(f.entry("weight").shape, (std::vector<int64_t>{n, k}));
  ASSERT_EQ(f.entry("weight_scale").shape, (std::vector<int64_t>{n, 1}));
  const DeviceArray<int8_t> w(f.read_as<int8_t>("weight", "I8"));
  const DeviceArray<float> ws(f.read_as<float>("weight_scale", "F32"));
  for (const int64_t m : {1, 5}) {
    const std::string c = fmt::format("M{}", m);
    SCOPED_TRACE(c);
    const DeviceArray<int8_t> xq(f.read_as<int8_t>(c + ".xq", "I8"));
    const DeviceArray<float> xs(f.read_as<float>(c + ".xs", "F32"));
    const std::vector<uint16_t> want = f.read_as<uint16_t>(c + ".out", "BF16");
    ASSERT_EQ(xq.size(), size_t(m * k));
    ASSERT_EQ(want.size(), size_t(m * n));
    DeviceArray<uint16_t> y(size_t(m * n));
    cuda::gemm_i8(xq.get(), k, xs.get(), w.get(), ws.get(), nullptr, y.get(), n, m, n, k,
                  gemm_kernel(), nullptr);
    sync_check("gemm_i8 golden");
    std::string where;
    EXPECT_EQ(count_bit_diffs(y.download(), want, m, n, n, &where), 0) << "differing at" << where;
  }
}

// ---- gemm_bf16: against fp64 and the CPU backend ---------------------------------

double bf16_to_double(uint16_t b) {
  return double(bf16f(b));
}

TEST_F(GpuGemm, Bf16MatchesFp64) {
  struct Case {
    int64_t m, n, k, ldx;
    bool bias;
  };
  for (const Case& c : {Case{259, 768, 512, 512, true}, Case{1, 1536, 5376, 5376, true},
                        Case{61, 100, 5376, 5384, false}, Case{7, 768, 512, 513, true}}) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                 " k=" + std::to_string(c.k) + " ldx=" + std::to_string(c.ldx));
    const Bf16Problem p(c.m, c.n, c.k, c.ldx, 61);
    DeviceArray<uint16_t> y(size_t(c.m * c.n));
    p.run(0, c.m, y.get(), c.n, c.bias);
    // bf16 output rounding alone is ~2^-9 relative, RMS ~2^-9 / sqrt(3).
    check_deviation("gemm bf16 vs fp64", y.download(), fp64_reference(p, bf16_to_double, c.bias),
                    c.m, c.n, kGemmBf16VsFp64);
  }
}

TEST_F(GpuGemm, Bf16MatchesCpuBackend) {
  const int64_t m = 64, n = 768, k = 512;
  const Bf16Problem p(m, n, k, k, 71);
  QuantLinear q;
  q.format = WeightFormat::bf16;
  q.out = n;
  q.in = k;
  q.w_bf16 = p.hw;
  q.bias = p.hbias;
  std::vector<uint16_t> x = p.hx, y_cpu(size_t(m * n));
  const Tensor xt = Tensor::contiguous(x.data(), DType::bf16, {m, k});
  const Tensor yt = Tensor::contiguous(y_cpu.data(), DType::bf16, {m, n});
  make_cpu_backend(1)->linear(xt, q, yt);

  DeviceArray<uint16_t> y(size_t(m * n));
  p.run(0, m, y.get(), n);
  std::vector<double> want(y_cpu.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = bf16_to_double(y_cpu[i]);
  check_deviation("gemm bf16 vs CPU", y.download(), want, m, n, kGemmBf16VsCpu);
}

// ---- gemm_f32: against fp64 -------------------------------------------------------

TEST_F(GpuGemm, F32MatchesFp64) {
  struct Case {
    int64_t m, n, k, ldx;
    bool bias;
  };
  for (const Case& c : {Case{259, 96, 5376, 5376, true}, Case{37, 32, 5376, 5376, true},
                        Case{259, 5376, 96, 96, true}, Case{67, 5376, 32, 32, false},
                        Case{1, 5376, 256, 256, true}, Case{5, 3, 7, 9, true}}) {
    SCOPED_TRACE("m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) +
                 " k=" + std::to_string(c.k));
    const F32Problem p(c.m, c.n, c.k, c.ldx, 81);
    DeviceArray<float> y(size_t(c.m * c.n));
    p.run(0, c.m, y.get(), c.n, c.bias);
    check_deviation("gemm f32 vs fp64", y.download(),
                    fp64_reference(
                        p, [](float v) { return double(v); }, c.bias),
                    c.m, c.n, kGemmF32Bound);
  }
}

}  // namespace
}  // namespace h3s
