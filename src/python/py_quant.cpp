// convrot_quantize: the engine's int8 ConvRot activation quantiser (bit-exact
// with comfy-kitchen's CUDA kernel, tests/data/golden) over the rows of a bf16
// [M, K] array, so a host (the ComfyUI end-to-end check) can compare its
// bits with comfy-kitchen's own quantiser on the same activations.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "model/convrot.hpp"
#include "model/quant_linear.hpp"
#include "python/bindings.hpp"
#include "python/dlpack_tensor.hpp"

namespace h3s::py {

namespace nb = nanobind;
using namespace nb::literals;

namespace {

void expect_host_matrix(const Tensor& t, int64_t rows, int64_t cols, const char* arg) {
  if (t.device != Device::host)
    fail(ErrorKind::invalid_argument, "convrot_quantize: {} must be in host memory (use .cpu())",
         arg);
  const bool shape_ok = cols < 0 ? (t.rank == 1 && t.shape[0] == rows)
                                 : (t.rank == 2 && t.shape[0] == rows && t.shape[1] == cols);
  if (!shape_ok || !t.is_contiguous())
    fail(ErrorKind::invalid_argument, "convrot_quantize: {} must be contiguous with shape [{}{}{}]",
         arg, rows, cols < 0 ? "" : ", ", cols < 0 ? std::string() : std::to_string(cols));
}

void convrot_quantize(const ReadArray& x_arr, const WriteArray& q_arr, const WriteArray& s_arr) {
  const Tensor x = tensor_view(x_arr, "x", {DType::bf16});
  if (x.rank != 2) fail(ErrorKind::invalid_argument, "convrot_quantize: x must be [M, K]");
  const int64_t m = x.shape[0], k = x.shape[1];
  if (k % kConvRotGroup != 0)
    fail(ErrorKind::invalid_argument, "convrot_quantize: K = {} must be a multiple of {}", k,
         kConvRotGroup);
  expect_host_matrix(x, m, k, "x");
  const Tensor q = tensor_view(q_arr, "q", {DType::i8});
  const Tensor s = tensor_view(s_arr, "scale", {DType::f32});
  expect_host_matrix(q, m, k, "q");
  expect_host_matrix(s, m, -1, "scale");
  std::vector<float> row(static_cast<size_t>(k));
  for (int64_t r = 0; r < m; ++r) {
    const uint16_t* xr = x.ptr<uint16_t>() + r * k;
    for (int64_t c = 0; c < k; ++c) row[size_t(c)] = bf16_to_f32(bf16{xr[c]});
    quantize_row_convrot(row.data(), k, q.ptr<int8_t>() + r * k, s.ptr<float>() + r);
  }
}

}  // namespace

void bind_quant(nb::module_& m) {
  m.def(
      "convrot_quantize",
      [](const ReadArray& x, const WriteArray& q, const WriteArray& scale) {
        const nb::gil_scoped_release unlocked;
        convrot_quantize(x, q, scale);
      },
      "x"_a, "q"_a, "scale"_a,
      "ConvRot int8 quantiser over rows of x (bf16 [M, K], host) into q (int8 [M, K]) and "
      "scale (float32 [M]), bit-exact with comfy-kitchen's CUDA kernel.");
}

}  // namespace h3s::py
