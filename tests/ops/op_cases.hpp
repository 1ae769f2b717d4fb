// Shared harness of the op tests, in the spirit of ggml's test-backend-ops:
// every op is a small case (parameters, seeded inputs, outputs) that can be run
// over any row range of its operands, and the harness checks the backend
// contract (backend.hpp): row invariance, bit for bit, under any chunking and
// any thread count.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"
#include "core/tensor.hpp"
#include "model/packed_layout.hpp"

namespace h3s::test {

// Row counts of every op test: 1, 2, primes and sizes around the CPU row block.
inline constexpr int64_t kRowCounts[] = {1, 2, 5, 17, 64, 97, 259};

// A host matrix [rows, cols] with row stride >= cols (the padding stays
// untouched by the ops, so it is compared too), viewed as a 2-D Tensor.
class Mat {
 public:
  Mat() = default;
  Mat(DType dtype, int64_t rows, int64_t cols, int64_t stride = -1)
      : dtype_(dtype), rows_(rows), cols_(cols), stride_(stride < 0 ? cols : stride) {
    H3S_CHECK(dtype == DType::bf16 || dtype == DType::f32);
    H3S_CHECK(stride_ >= cols_);
    const size_t bytes = size_t(std::max<int64_t>(rows_ * stride_, 1)) * dtype_size(dtype);
    store_.assign((bytes + 3) / 4, 0u);
  }

  Tensor view() const {
    Tensor t = Tensor::contiguous(const_cast<uint32_t*>(store_.data()), dtype_, {rows_, stride_});
    return t.cols_view(0, cols_);
  }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  int64_t stride() const { return stride_; }
  DType dtype() const { return dtype_; }
  size_t elem_bytes() const { return dtype_size(dtype_); }

  uint16_t* bf(int64_t r) { return reinterpret_cast<uint16_t*>(store_.data()) + r * stride_; }
  const uint16_t* bf(int64_t r) const {
    return reinterpret_cast<const uint16_t*>(store_.data()) + r * stride_;
  }
  float* f32(int64_t r) { return reinterpret_cast<float*>(store_.data()) + r * stride_; }
  const float* f32(int64_t r) const {
    return reinterpret_cast<const float*>(store_.data()) + r * stride_;
  }
  float get(int64_t r, int64_t c) const {
    return dtype_ == DType::bf16 ? bf16_to_f32(bf16{bf(r)[c]}) : f32(r)[c];
  }
  // One row as fp32 values.
  std::vector<float> row_f32(int64_t r) const {
    std::vector<float> v(static_cast<size_t>(cols_));
    for (int64_t c = 0; c < cols_; ++c) v[size_t(c)] = get(r, c);
    return v;
  }
  void set(int64_t r, int64_t c, float v) {
    if (dtype_ == DType::bf16)
      bf(r)[c] = f32_to_bf16(v).bits;
    else
      f32(r)[c] = v;
  }
  // Normal(0, scale) values (rounded to bf16 for bf16), padding included.
  void fill_normal(Rng& rng, float scale) {
    for (int64_t r = 0; r < rows_; ++r)
      for (int64_t c = 0; c < stride_; ++c) set(r, c, rng.normal() * scale);
  }
  // A NaN pattern the ops never produce, so an unwritten element shows.
  void fill_sentinel() {
    if (dtype_ == DType::bf16)
      std::fill_n(reinterpret_cast<uint16_t*>(store_.data()), rows_ * stride_, uint16_t(0x7fa5));
    else
      std::fill(store_.begin(), store_.end(), 0x7fa5a5a5u);
  }
  bool same_bits(const Mat& o) const { return store_ == o.store_; }
  // First element (row, col) where the bits differ, or {-1, -1}.
  std::pair<int64_t, int64_t> first_difference(const Mat& o) const {
    const size_t es = elem_bytes();
    const auto* a = reinterpret_cast<const unsigned char*>(store_.data());
    const auto* b = reinterpret_cast<const unsigned char*>(o.store_.data());
    for (int64_t i = 0; i < rows_ * stride_; ++i)
      if (std::memcmp(a + size_t(i) * es, b + size_t(i) * es, es) != 0)
        return {i / stride_, i % stride_};
    return {-1, -1};
  }

 private:
  DType dtype_ = DType::bf16;
  int64_t rows_ = 0, cols_ = 0, stride_ = 0;
  std::vector<uint32_t> store_;
};

inline std::string describe(const std::vector<RowRange>& chunks) {
  std::string s;
  for (const RowRange& c : chunks) {
    if (!s.empty()) s += ' ';
    s += std::to_string(c.size());
  }
  return "chunk sizes [" + s + "]";
}

inline std::vector<RowRange> chunks_of_sizes(int64_t m, const std::vector<int64_t>& sizes) {
  std::vector<RowRange> out;
  int64_t pos = 0;
  for (int64_t s : sizes) {
    if (pos >= m) break;
    const int64_t e = std::min(m, pos + s);
    out.push_back({pos, e});
    pos = e;
  }
  H3S_CHECK(pos == m);
  return out;
}

// Random chunk sizes drawn from {1, 2, 3, 7, 13, 64, 65, 259, m} and uniform
// in [1, m]; the last chunk is whatever is left.
inline std::vector<RowRange> random_chunks(int64_t m, Rng& rng) {
  static constexpr int64_t kSizes[] = {1, 2, 3, 7, 13, 64, 65, 259};
  std::vector<RowRange> out;
  int64_t pos = 0;
  while (pos < m) {
    const int64_t pick = rng.below(10);
    const int64_t want = pick < 8 ? kSizes[pick] : pick == 8 ? m : 1 + rng.below(m);
    const int64_t e = std::min(m, pos + want);
    out.push_back({pos, e});
    pos = e;
  }
  return out;
}

// The chunkings every op is checked under: random ones, fixed 16 and 64 with
// their tails, a tail of 3 (< 4) and of 15 (< 16), a first chunk of one row
// (every later chunk starts off any alignment) and, for small m, single rows.
// `quick` keeps one random chunking and the short-tail ones.
inline std::vector<std::vector<RowRange>> chunkings(int64_t m, uint64_t seed, bool quick = false) {
  Rng rng(mix_seed(seed, uint64_t(m), 0x0c4u));
  std::vector<std::vector<RowRange>> out;
  out.push_back(random_chunks(m, rng));
  if (m > 3) out.push_back({{0, m - 3}, {m - 3, m}});
  if (quick) return out;
  out.push_back(random_chunks(m, rng));
  if (m > 1) out.push_back({{0, 1}, {1, m}});
  if (m > 15) out.push_back({{0, m - 15}, {m - 15, m}});
  out.push_back(chunks_of_sizes(m, std::vector<int64_t>(size_t(m / 16 + 1), 16)));
  if (m > 64) out.push_back(chunks_of_sizes(m, std::vector<int64_t>(size_t(m / 64 + 1), 64)));
  if (m <= 17) out.push_back(chunks_of_sizes(m, std::vector<int64_t>(size_t(m), 1)));
  return out;
}

// Mod runs clipped to chunk c and made relative to c.begin (what an executor
// passes for a chunk; PackedLayout::runs_in does the same).
inline std::vector<ModRun> clip_runs(const std::vector<ModRun>& runs, RowRange c) {
  std::vector<ModRun> out;
  for (const ModRun& r : runs) {
    const int64_t b = std::max(r.begin, c.begin), e = std::min(r.end, c.end);
    if (b < e) out.push_back({b - c.begin, e - c.begin, r.mod_row});
  }
  return out;
}

// Runs covering [0, m) in order, random lengths, mod rows in [0, mod_rows).
inline std::vector<ModRun> random_runs(int64_t m, int32_t mod_rows, Rng& rng) {
  static constexpr int64_t kLens[] = {1, 2, 5, 17, 40, 100};
  std::vector<ModRun> runs;
  int64_t pos = 0;
  while (pos < m) {
    const int64_t e = std::min(m, pos + kLens[rng.below(6)]);
    runs.push_back({pos, e, int32_t(rng.below(mod_rows))});
    pos = e;
  }
  return runs;
}

// One op over rows of its operands. reset() puts the outputs to the sentinel
// and in-place operands back to their inputs; run() executes the op on the
// row views [r.begin, r.end) of every row-indexed operand.
struct OpCase {
  virtual ~OpCase() = default;
  virtual std::string label() const = 0;
  virtual int64_t rows() const = 0;
  virtual void reset() = 0;
  virtual void run(Backend& be, RowRange r) = 0;
  virtual const Mat& output() const = 0;
};

inline Backend& cpu3() {
  static const std::unique_ptr<Backend> be = make_cpu_backend(3);  // odd on purpose
  return *be;
}
inline Backend& cpu1() {
  static const std::unique_ptr<Backend> be = make_cpu_backend(1);
  return *be;
}

inline void run_chunked(OpCase& c, Backend& be, const std::vector<RowRange>& chunks) {
  c.reset();
  for (const RowRange& r : chunks) c.run(be, r);
}

// Runs the op over all rows on 3 threads (the result returned), then under
// every chunking and on 1 thread, and expects the same bits each time.
inline Mat check_row_invariance(OpCase& c, uint64_t seed, bool quick = false) {
  const int64_t m = c.rows();
  run_chunked(c, cpu3(), {{0, m}});
  Mat whole = c.output();
  auto expect_same = [&](const std::string& how) {
    if (c.output().same_bits(whole)) return;
    const auto [r, col] = c.output().first_difference(whole);
    ADD_FAILURE() << c.label() << ": " << how << " differs from the whole call, first at row " << r
                  << " col " << col << " (" << c.output().get(r, col) << " vs " << whole.get(r, col)
                  << ")";
  };
  for (const auto& ch : chunkings(m, seed, quick)) {
    run_chunked(c, cpu3(), ch);
    expect_same(describe(ch) + " on 3 threads");
  }
  run_chunked(c, cpu1(), {{0, m}});
  expect_same("1 thread");
  if (!quick && m > 3) {
    const std::vector<RowRange> ch = {{0, m - 3}, {m - 3, m}};
    run_chunked(c, cpu1(), ch);
    expect_same(describe(ch) + " on 1 thread");
  }
  return whole;
}

// Expects f() to throw h3s::Error(invalid_argument) whose message contains
// `needle` (the operand's name).
template <typename F>
void expect_error(F&& f, std::string_view needle, const char* what) {
  try {
    f();
    ADD_FAILURE() << what << ": no h3s::Error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument) << what << ": " << e.what();
    EXPECT_NE(std::string_view(e.what()).find(needle), std::string_view::npos)
        << what << ": message \"" << e.what() << "\" does not name \"" << needle << "\"";
  }
}

}  // namespace h3s::test
