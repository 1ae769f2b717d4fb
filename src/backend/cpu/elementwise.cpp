// Elementwise ops: SiLU, dtype conversion, copy, scale, residual adds,
// host transfers.
#include <cstring>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/math.hpp"

namespace h3s::cpu {

namespace {

float load(const Tensor& t, int64_t r, int64_t c) {
  const int64_t i = r * t.stride[0] + c * (t.rank >= 2 ? t.stride[1] : 1);
  if (t.dtype == DType::bf16) return bf16_to_f32(bf16{t.ptr<uint16_t>()[i]});
  return t.ptr<float>()[i];
}

void store(const Tensor& t, int64_t r, int64_t c, float v) {
  const int64_t i = r * t.stride[0] + c * (t.rank >= 2 ? t.stride[1] : 1);
  if (t.dtype == DType::bf16)
    t.ptr<uint16_t>()[i] = f32_to_bf16(v).bits;
  else
    t.ptr<float>()[i] = v;
}

void expect_float(const Tensor& t, const char* op, const char* operand) {
  if (t.dtype != DType::bf16 && t.dtype != DType::f32)
    fail(ErrorKind::invalid_argument, "{}: {} must be bf16 or f32, got {}", op, operand,
         dtype_name(t.dtype));
}

void expect_same_shape2(const Tensor& a, const Tensor& b, const char* op) {
  if (a.rows() != b.rows() || a.cols() != b.cols())
    fail(ErrorKind::invalid_argument, "{}: shapes differ ([{}, {}] vs [{}, {}])", op, a.rows(),
         a.cols(), b.rows(), b.cols());
}

}  // namespace

void CpuBackend::silu(const Tensor& x, const Tensor& y) {
  expect_float(x, "silu", "x");
  expect_dtype(y, x.dtype, "silu", "y");
  expect_same_shape2(x, y, "silu");
  for (int64_t r = 0; r < x.rows(); ++r)
    for (int64_t c = 0; c < x.cols(); ++c) store(y, r, c, silu_f32(load(x, r, c)));
}

void CpuBackend::convert(const Tensor& x, const Tensor& y) {
  expect_float(x, "convert", "x");
  expect_float(y, "convert", "y");
  expect_same_shape2(x, y, "convert");
  pool_.parallel_for(x.rows(), 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < x.cols(); ++c) store(y, r, c, load(x, r, c));
  });
}

void CpuBackend::copy(const Tensor& x, const Tensor& y) {
  if (x.dtype != y.dtype)
    fail(ErrorKind::invalid_argument, "copy: dtypes differ ({} vs {})", dtype_name(x.dtype),
         dtype_name(y.dtype));
  if (x.rank != y.rank || x.shape != y.shape)
    fail(ErrorKind::invalid_argument, "copy: shapes differ");
  const int64_t es = int64_t(dtype_size(x.dtype));
  const int r = x.rank;
  // Innermost dimension must be unit-stride on both sides; loop over the rest.
  H3S_CHECK(x.stride[size_t(r - 1)] == 1 && y.stride[size_t(r - 1)] == 1);
  const int64_t inner = x.shape[size_t(r - 1)];
  int64_t outer = 1;
  for (int d = 0; d < r - 1; ++d) outer *= x.shape[size_t(d)];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t xo = 0, yo = 0, rem = o;
    for (int d = r - 2; d >= 0; --d) {
      const int64_t i = rem % x.shape[size_t(d)];
      rem /= x.shape[size_t(d)];
      xo += i * x.stride[size_t(d)];
      yo += i * y.stride[size_t(d)];
    }
    std::memcpy(static_cast<char*>(y.data) + yo * es, static_cast<const char*>(x.data) + xo * es,
                size_t(inner * es));
  }
}

void CpuBackend::scale(const Tensor& x, float alpha) {
  expect_dtype(x, DType::f32, "scale", "x");
  for (int64_t r = 0; r < x.rows(); ++r)
    for (int64_t c = 0; c < x.cols(); ++c) store(x, r, c, alpha * load(x, r, c));
}

void CpuBackend::add_residual(const Tensor& x, const Tensor& y) {
  expect_dtype(x, DType::bf16, "add_residual", "x");
  expect_dtype(y, DType::bf16, "add_residual", "y");
  expect_same_shape2(x, y, "add_residual");
  pool_.parallel_for(x.rows(), 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < x.cols(); ++c) store(x, r, c, load(y, r, c) + load(x, r, c));
  });
}

void CpuBackend::gated_residual(const Tensor& x, const Tensor& y, const Tensor& gate,
                                std::span<const ModRun> runs) {
  expect_dtype(x, DType::bf16, "gated_residual", "x");
  expect_dtype(y, DType::bf16, "gated_residual", "y");
  expect_dtype(gate, DType::bf16, "gated_residual", "gate");
  expect_same_shape2(x, y, "gated_residual");
  expect_cols(gate, x.cols(), "gated_residual", "gate");
  for (const ModRun& run : runs) {
    if (run.begin < 0 || run.end > x.rows() || run.mod_row < 0 || run.mod_row >= gate.rows())
      fail(ErrorKind::invalid_argument, "gated_residual: run [{}, {}) row {} out of range",
           run.begin, run.end, run.mod_row);
    pool_.parallel_for(run.end - run.begin, 64, [&](int64_t r0, int64_t r1) {
      for (int64_t r = run.begin + r0; r < run.begin + r1; ++r)
        for (int64_t c = 0; c < x.cols(); ++c) {
          const float p = load(y, r, c) * load(gate, run.mod_row, c);
          store(x, r, c, load(x, r, c) + p);
        }
    });
  }
}

// An empty tensor may have no memory (and its host vector no data): memcpy
// must not see their null pointers.
void CpuBackend::upload(const void* host, const Tensor& dst) {
  H3S_CHECK(dst.is_contiguous());
  if (dst.numel() == 0) return;
  std::memcpy(dst.data, host, size_t(dst.numel()) * dtype_size(dst.dtype));
}

void CpuBackend::download(const Tensor& src, void* host) {
  H3S_CHECK(src.is_contiguous());
  if (src.numel() == 0) return;
  std::memcpy(host, src.data, size_t(src.numel()) * dtype_size(src.dtype));
}

}  // namespace h3s::cpu
