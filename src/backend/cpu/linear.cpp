// Linear layers in every weight format, and the SwiGLU-fed fc2.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/gemm.hpp"
#include "backend/cpu/math.hpp"
#include "model/convrot.hpp"

namespace h3s::cpu {

namespace {

// y = act W^T for act rows produced by `load` (fp32 values), in w's format.
void linear_rows(ThreadPool& pool, int64_t rows, const RowLoader& load, const QuantLinear& w,
                 RowRange feat, const Tensor& y) {
  const int64_t n = feat.size(), k = w.in, f0 = feat.begin;
  const float* bias = w.has_bias() ? w.bias.data() + f0 : nullptr;
  // nvfp4 multiplies as its bf16 decode, made by prepare (no fp4 GEMM on this backend).
  const bool float_weights = w.format == WeightFormat::bf16 || w.format == WeightFormat::f32 ||
                             w.format == WeightFormat::nvfp4;
  if (float_weights) {
    const bool f32_out = y.dtype == DType::f32;
    gemm_f32(pool, rows, n, k, load,
             w.format != WeightFormat::f32 ? w.w_bf16.data() + f0 * k : nullptr,
             w.format == WeightFormat::f32 ? w.w_f32.data() + f0 * k : nullptr,
             [&](int64_t r, int64_t n0, int64_t n1, const float* dots) {
               for (int64_t j = n0; j < n1; ++j) {
                 const float v = bias ? dots[j - n0] + bias[j] : dots[j - n0];
                 if (f32_out)
                   y.row<float>(r)[j] = v;
                 else
                   y.row<uint16_t>(r)[j] = f32_to_bf16(v).bits;
               }
             });
    return;
  }
  // int8 / w4a8: ConvRot-quantise each activation row, exact int32 GEMM,
  // epilogue bf16((acc * xs) * ws) in exactly that order (docs/H3_MODEL.md 4).
  const int64_t block = std::min(rows, kGemmRowBlock);
  std::vector<int8_t> xq(static_cast<size_t>(block * k));
  std::vector<float> xs(static_cast<size_t>(block));
  std::vector<int32_t> acc(static_cast<size_t>(block * n));
  for (int64_t m0 = 0; m0 < rows; m0 += kGemmRowBlock) {
    const int64_t mb = std::min(kGemmRowBlock, rows - m0);
    pool.parallel_for(mb, 1, [&](int64_t r0, int64_t r1) {
      std::vector<float> a(static_cast<size_t>(k));
      for (int64_t r = r0; r < r1; ++r) {
        load(m0 + r, a.data());
        quantize_row_convrot(a.data(), k, xq.data() + r * k, &xs[size_t(r)]);
      }
    });
    gemm_i8(pool, mb, n, k, xq.data(), w.w_i8.data() + f0 * k, acc.data());
    pool.parallel_for(mb, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        uint16_t* out = y.row<uint16_t>(m0 + r);
        const float s = xs[size_t(r)];
        for (int64_t j = 0; j < n; ++j) {
          float v = (float(acc[size_t(r * n + j)]) * s) * w.w_scale[size_t(f0 + j)];
          if (bias) v += bias[j];
          out[j] = f32_to_bf16(v).bits;
        }
      }
    });
  }
}

}  // namespace

void CpuBackend::linear(const Tensor& x, const QuantLinear& w, const Tensor& y, RowRange features) {
  features = checks::linear_args(x, w, y, features, Device::host);
  const DType io = w.format == WeightFormat::f32 ? DType::f32 : DType::bf16;
  const int64_t k = w.in;
  RowLoader load;
  if (io == DType::f32)
    load = [&](int64_t r, float* dst) { std::copy_n(x.row<float>(r), k, dst); };
  else
    load = [&](int64_t r, float* dst) {
      const uint16_t* src = x.row<uint16_t>(r);
      for (int64_t i = 0; i < k; ++i) dst[i] = bf16_to_f32(bf16{src[i]});
    };
  linear_rows(pool_, x.rows(), load, w, features, y);
}

void CpuBackend::swiglu_linear(const Tensor& f, const QuantLinear& w, const Tensor& y) {
  const char* op = "swiglu_linear";
  checks::expect_prepared(w, Device::host, op);
  if (w.format == WeightFormat::f32)
    fail(ErrorKind::invalid_argument, "{}: fc2 weight must be bf16, int8 or w4a8", op);
  expect_dtype(f, DType::bf16, op, "f");
  expect_dtype(y, DType::bf16, op, "y");
  expect_unit_col_stride(f, op, "f");
  expect_cols(f, 2 * w.in, op, "f");
  expect_cols(y, w.out, op, "y");
  expect_rows(y, f.rows(), op, "y");
  const int64_t ffn = w.in;
  // int8 files fuse SwiGLU into fc2's quantiser in fp32; everything else runs
  // the eager bf16 SwiGLU first (docs/H3_MODEL.md 3.10, 4, 5).
  const bool fused = w.format == WeightFormat::int8;
  RowLoader load = [&, fused](int64_t r, float* dst) {
    const uint16_t* gate = f.row<uint16_t>(r);
    const uint16_t* up = gate + ffn;
    for (int64_t i = 0; i < ffn; ++i) {
      const float g = bf16_to_f32(bf16{gate[i]}), u = bf16_to_f32(bf16{up[i]});
      dst[i] = fused ? swiglu_f32(g, u) : swiglu_bf16(g, u);
    }
  };
  linear_rows(pool_, f.rows(), load, w, {0, w.out}, y);
}

}  // namespace h3s::cpu
