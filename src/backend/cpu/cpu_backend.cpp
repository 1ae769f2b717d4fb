// CpuBackend construction and the shared argument checks.
#include "backend/cpu/cpu_backend.hpp"

namespace h3s {

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<cpu::CpuBackend>(threads);
}

namespace cpu {

void expect_dtype(const Tensor& t, DType d, const char* op, const char* operand) {
  if (t.dtype != d)
    fail(ErrorKind::invalid_argument, "{}: {} must be {}, got {}", op, operand, dtype_name(d),
         dtype_name(t.dtype));
  if (t.device != Device::host)
    fail(ErrorKind::invalid_argument, "{}: {} must be host memory for the cpu backend", op,
         operand);
}

void expect_rows(const Tensor& t, int64_t rows, const char* op, const char* operand) {
  if (t.rows() != rows)
    fail(ErrorKind::invalid_argument, "{}: {} has {} rows, expected {}", op, operand, t.rows(),
         rows);
}

void expect_cols(const Tensor& t, int64_t cols, const char* op, const char* operand) {
  if (t.cols() != cols)
    fail(ErrorKind::invalid_argument, "{}: {} has {} columns, expected {}", op, operand, t.cols(),
         cols);
}

void expect_unit_col_stride(const Tensor& t, const char* op, const char* operand) {
  if (t.rank >= 2 && t.cols() > 1 && t.stride[1] != 1)
    fail(ErrorKind::invalid_argument, "{}: {} must have unit column stride", op, operand);
}

}  // namespace cpu
}  // namespace h3s
