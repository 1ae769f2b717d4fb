// How far a GPU result is from the CPU reference, measured three ways so that
// no single summary can hide a wrong row: the relative RMS over the tensor,
// the worst row's relative RMS, and the largest single error relative to the
// reference's RMS. GPU-vs-CPU bounds are set on all three from measured
// values with a stated margin (tests/gpu/*.cpp say which and when).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

namespace h3s::test {

struct Deviation {
  double rel_rms = 0.0;        // sqrt(sum d^2 / sum want^2) over every element
  double worst_row_rms = 0.0;  // the same per row, the largest
  int64_t worst_row = -1;
  double max_rel = 0.0;  // max |d| / rms(want) over every element
  int64_t count = 0, rows = 0;

  std::string describe() const {
    std::ostringstream s;
    s << "rel-rms " << rel_rms << ", worst row " << worst_row_rms << " (row " << worst_row << " of "
      << rows << "), max |d| / rms " << max_rel;
    return s.str();
  }
  // Widens this to cover another measurement (the worst of several cases).
  void merge(const Deviation& o) {
    rel_rms = std::max(rel_rms, o.rel_rms);
    if (o.worst_row_rms > worst_row_rms) {
      worst_row_rms = o.worst_row_rms;
      worst_row = o.worst_row;
    }
    max_rel = std::max(max_rel, o.max_rel);
    count += o.count;
    rows += o.rows;
  }
};

// got(r, c) and want(r, c) return the values (as double) of a [rows, cols]
// result. A row whose reference is all zeros is measured against the
// tensor's mean row energy (so an exact zero row cannot divide by zero, and a
// wrong one still counts).
template <class Got, class Want>
Deviation measure_deviation(int64_t rows, int64_t cols, Got got, Want want) {
  Deviation d;
  d.rows = rows;
  d.count = rows * cols;
  double err = 0.0, ref = 0.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double w = want(r, c), e = got(r, c) - w;
      err += e * e;
      ref += w * w;
    }
  const double mean_row_ref = rows > 0 ? ref / double(rows) : 0.0;
  const double rms = d.count > 0 ? std::sqrt(ref / double(d.count)) : 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    double row_err = 0.0, row_ref = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double w = want(r, c), e = got(r, c) - w;
      row_err += e * e;
      row_ref += w * w;
      d.max_rel = std::max(d.max_rel, rms > 0.0 ? std::fabs(e) / rms : std::fabs(e));
    }
    const double denom = row_ref > 0.0 ? row_ref : mean_row_ref;
    const double row_rms = denom > 0.0 ? std::sqrt(row_err / denom) : std::sqrt(row_err);
    if (row_rms > d.worst_row_rms || d.worst_row < 0) {
      d.worst_row_rms = row_rms;
      d.worst_row = r;
    }
  }
  d.rel_rms = ref > 0.0 ? std::sqrt(err / ref) : std::sqrt(err);
  return d;
}

// Bounds on the three measures, each set from a measurement (see the call site).
struct DeviationBound {
  double rel_rms, worst_row_rms, max_rel;
};

inline void expect_within(const Deviation& d, const DeviationBound& b, const std::string& what) {
  EXPECT_LT(d.rel_rms, b.rel_rms) << what << ": " << d.describe();
  EXPECT_LT(d.worst_row_rms, b.worst_row_rms) << what << ": " << d.describe();
  EXPECT_LT(d.max_rel, b.max_rel) << what << ": " << d.describe();
}

}  // namespace h3s::test
