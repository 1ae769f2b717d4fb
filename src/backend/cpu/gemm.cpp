// Blocked CPU GEMMs (see gemm.hpp for the invariance argument).
#include "backend/cpu/gemm.hpp"

#include <algorithm>
#include <vector>

#include "core/dot_f32.hpp"
#include "core/dtype.hpp"

namespace h3s::cpu {

namespace {

// Weight rows converted per task; a 4 x 4 micro-tile of (row, column) dots
// shares its operand loads.
constexpr int64_t kPanel = 16;
constexpr int kTile = 4;

// Dots of rows x[0..r) against columns w[0..c) (r, c <= kTile), every dot in
// the dot_f32 order: kDotLanes lanes over k, tree reduce, then the K tail.
template <int R, int C>
void micro_tile(const float* const* x, const float* const* w, int64_t k, float* out, int ldo) {
  float acc[R][C][kDotLanes] = {};
  const int64_t kv = k / kDotLanes * kDotLanes;
  for (int64_t i = 0; i < kv; i += kDotLanes) {
    for (int a = 0; a < R; ++a) {
      const float* xa = x[a] + i;
      for (int b = 0; b < C; ++b) {
        const float* wb = w[b] + i;
        for (int l = 0; l < kDotLanes; ++l) acc[a][b][l] += xa[l] * wb[l];
      }
    }
  }
  for (int a = 0; a < R; ++a)
    for (int b = 0; b < C; ++b) {
      float s = reduce_lanes(acc[a][b]);
      for (int64_t i = kv; i < k; ++i) s += x[a][i] * w[b][i];
      out[a * ldo + b] = s;
    }
}

using TileFn = void (*)(const float* const*, const float* const*, int64_t, float*, int);

template <int R>
constexpr TileFn tile_fn(int c) {
  switch (c) {
    case 1:
      return micro_tile<R, 1>;
    case 2:
      return micro_tile<R, 2>;
    case 3:
      return micro_tile<R, 3>;
    default:
      return micro_tile<R, 4>;
  }
}

TileFn pick_tile(int r, int c) {
  switch (r) {
    case 1:
      return tile_fn<1>(c);
    case 2:
      return tile_fn<2>(c);
    case 3:
      return tile_fn<3>(c);
    default:
      return tile_fn<4>(c);
  }
}

}  // namespace

void gemm_f32(ThreadPool& pool, int64_t m, int64_t n, int64_t k, const RowLoader& load_x,
              const uint16_t* w_bf16, const float* w_f32, const F32Epilogue& epilogue) {
  std::vector<float> xs(static_cast<size_t>(std::min(m, kGemmRowBlock) * k));
  const int64_t panels = (n + kPanel - 1) / kPanel;
  for (int64_t m0 = 0; m0 < m; m0 += kGemmRowBlock) {
    const int64_t rows = std::min(kGemmRowBlock, m - m0);
    pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) load_x(m0 + r, xs.data() + r * k);
    });
    pool.parallel_for(panels, 1, [&](int64_t p0, int64_t p1) {
      std::vector<float> wp(static_cast<size_t>(w_f32 ? 0 : kPanel * k));
      std::vector<float> dots(static_cast<size_t>(rows * kPanel));
      for (int64_t p = p0; p < p1; ++p) {
        const int64_t n0 = p * kPanel, n1 = std::min(n, n0 + kPanel), nc = n1 - n0;
        const float* wrows[kPanel];
        for (int64_t j = 0; j < nc; ++j) {
          if (w_f32) {
            wrows[j] = w_f32 + (n0 + j) * k;
          } else {
            float* dst = wp.data() + j * k;
            const uint16_t* src = w_bf16 + (n0 + j) * k;
            for (int64_t i = 0; i < k; ++i) dst[i] = bf16_to_f32(bf16{src[i]});
            wrows[j] = dst;
          }
        }
        for (int64_t r = 0; r < rows; r += kTile) {
          const int rt = int(std::min<int64_t>(kTile, rows - r));
          const float* xrows[kTile];
          for (int a = 0; a < rt; ++a) xrows[a] = xs.data() + (r + a) * k;
          for (int64_t j = 0; j < nc; j += kTile) {
            const int ct = int(std::min<int64_t>(kTile, nc - j));
            pick_tile(rt, ct)(xrows, wrows + j, k, dots.data() + r * kPanel + j, int(kPanel));
          }
        }
        for (int64_t r = 0; r < rows; ++r) epilogue(m0 + r, n0, n1, dots.data() + r * kPanel);
      }
    });
  }
}

void gemm_i8(ThreadPool& pool, int64_t rows, int64_t n, int64_t k, const int8_t* xq,
             const int8_t* w, int32_t* acc_out) {
  pool.parallel_for(n, 8, [&](int64_t n0, int64_t n1) {
    for (int64_t j = n0; j < n1; ++j) {
      const int8_t* wr = w + j * k;
      for (int64_t r = 0; r < rows; ++r) {
        const int8_t* xr = xq + r * k;
        int32_t acc = 0;  // |acc| <= K * 128 * 127 < 2^31 for K <= 131072
        for (int64_t i = 0; i < k; ++i) acc += int32_t(xr[i]) * int32_t(wr[i]);
        acc_out[r * n + j] = acc;
      }
    }
  });
}

}  // namespace h3s::cpu
