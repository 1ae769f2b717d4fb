// CpuBackend construction and the shared argument checks.
#include "backend/cpu/cpu_backend.hpp"

#include "backend/op_checks.hpp"

namespace h3s {

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  return std::make_unique<cpu::CpuBackend>(threads);
}

namespace cpu {

void expect_dtype(const Tensor& t, DType d, const char* op, const char* operand) {
  checks::expect_dtype(t, d, Device::host, op, operand);
}

}  // namespace cpu
}  // namespace h3s
