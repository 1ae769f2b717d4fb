// Shared argument checks (see op_checks.hpp).
#include "backend/op_checks.hpp"

#include "core/error.hpp"

namespace h3s::checks {

namespace {
const char* device_name(Device d) {
  return d == Device::host ? "host" : "device";
}
}  // namespace

void expect_device(const Tensor& t, Device d, const char* op, const char* operand) {
  if (t.device != d)
    fail(ErrorKind::invalid_argument, "{}: {} must be {} memory for the {} backend", op, operand,
         device_name(d), d == Device::host ? "cpu" : "cuda");
}

void expect_dtype(const Tensor& t, DType dt, Device d, const char* op, const char* operand) {
  if (t.dtype != dt)
    fail(ErrorKind::invalid_argument, "{}: {} must be {}, got {}", op, operand, dtype_name(dt),
         dtype_name(t.dtype));
  expect_device(t, d, op, operand);
}

void expect_float(const Tensor& t, Device d, const char* op, const char* operand) {
  if (t.dtype != DType::bf16 && t.dtype != DType::f32)
    fail(ErrorKind::invalid_argument, "{}: {} must be bf16 or f32, got {}", op, operand,
         dtype_name(t.dtype));
  expect_device(t, d, op, operand);
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
  if (t.rank > 2)
    fail(ErrorKind::invalid_argument, "{}: {} must be a 2-D [rows, cols] view, got rank {}", op,
         operand, t.rank);
  if (t.rank == 2 && t.cols() > 1 && t.stride[1] != 1)
    fail(ErrorKind::invalid_argument, "{}: {} must have unit column stride", op, operand);
}

void expect_runs(std::span<const ModRun> runs, int64_t rows, int64_t mod_rows, const char* op) {
  for (const ModRun& r : runs)
    if (r.begin < 0 || r.end > rows || r.begin > r.end || r.mod_row < 0 || r.mod_row >= mod_rows)
      fail(ErrorKind::invalid_argument, "{}: run [{}, {}) row {} out of range", op, r.begin, r.end,
           r.mod_row);
}

}  // namespace h3s::checks
