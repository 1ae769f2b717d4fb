// DLPack -> Tensor views (dlpack_tensor.hpp).
#include "python/dlpack_tensor.hpp"

#include <fmt/format.h>

#include <cstdint>

namespace h3s::py {

namespace {

using Code = nb::dlpack::dtype_code;

bool is(nb::dlpack::dtype d, Code code, int bits) {
  return d.code == uint8_t(code) && d.bits == bits && d.lanes == 1;
}

}  // namespace

std::string dtype_label(nb::dlpack::dtype d) {
  const char* kind = "unknown";
  switch (Code(d.code)) {
    case Code::Int:
      kind = "int";
      break;
    case Code::UInt:
      kind = "uint";
      break;
    case Code::Float:
      kind = "float";
      break;
    case Code::Bfloat:
      kind = "bfloat";
      break;
    case Code::Bool:
      return "bool";
    case Code::Float8_E4M3FN:
      return "float8_e4m3fn";
    case Code::Float8_E5M2:
      return "float8_e5m2";
    default:
      return fmt::format("dlpack dtype code {} ({} bits)", int(d.code), int(d.bits));
  }
  std::string s = fmt::format("{}{}", kind, int(d.bits));
  if (d.lanes != 1) s += fmt::format("x{}", int(d.lanes));
  return s;
}

std::optional<DType> engine_dtype(nb::dlpack::dtype d) {
  if (is(d, Code::Bfloat, 16)) return DType::bf16;
  if (is(d, Code::Float, 16)) return DType::f16;
  if (is(d, Code::Float, 32)) return DType::f32;
  if (is(d, Code::Int, 8)) return DType::i8;
  if (is(d, Code::UInt, 8)) return DType::u8;
  if (is(d, Code::Int, 32)) return DType::i32;
  if (is(d, Code::Float8_E4M3FN, 8)) return DType::f8e4m3;
  return std::nullopt;
}

std::optional<std::string> safetensors_dtype(nb::dlpack::dtype d) {
  if (is(d, Code::Bfloat, 16)) return "BF16";
  if (is(d, Code::Float, 16)) return "F16";
  if (is(d, Code::Float, 32)) return "F32";
  if (is(d, Code::Float, 64)) return "F64";
  if (is(d, Code::Int, 8)) return "I8";
  if (is(d, Code::UInt, 8)) return "U8";
  if (is(d, Code::Int, 16)) return "I16";
  if (is(d, Code::Int, 32)) return "I32";
  if (is(d, Code::Int, 64)) return "I64";
  if (is(d, Code::Bool, 8)) return "BOOL";
  if (is(d, Code::Float8_E4M3FN, 8)) return "F8_E4M3";
  if (is(d, Code::Float8_E5M2, 8)) return "F8_E5M2";
  return std::nullopt;
}

std::string device_label(int device_type, int device_id) {
  switch (device_type) {
    case nb::device::cpu::value:
      return "cpu";
    case nb::device::cuda::value:
      return fmt::format("cuda:{}", device_id);
    case nb::device::cuda_host::value:
      return "cuda_host (pinned)";
    case nb::device::cuda_managed::value:
      return fmt::format("cuda_managed:{}", device_id);
    default:
      return fmt::format("dlpack device type {}", device_type);
  }
}

template <class Array>
Tensor tensor_view(const Array& a, const char* arg, std::initializer_list<DType> dtypes) {
  const std::optional<DType> dt = engine_dtype(a.dtype());
  bool ok = false;
  std::string expected;
  for (DType d : dtypes) {
    ok |= dt == d;
    expected += (expected.empty() ? "" : " or ") + std::string(dtype_name(d));
  }
  if (!ok)
    throw nb::type_error(fmt::format("{}: dtype {} is not accepted, expected {}", arg,
                                     dtype_label(a.dtype()), expected)
                             .c_str());
  if (a.ndim() < 1 || a.ndim() > 4)
    throw nb::value_error(
        fmt::format("{}: has {} dimensions, expected 1 to 4", arg, a.ndim()).c_str());
  Tensor t;
  if (a.device_type() == nb::device::cpu::value)
    t.device = Device::host;
  else if (a.device_type() == nb::device::cuda::value)
    t.device = Device::cuda;
  else
    throw nb::value_error(fmt::format("{}: lives on {}, expected cpu or cuda memory", arg,
                                      device_label(a.device_type(), a.device_id()))
                              .c_str());
  t.dtype = *dt;
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)
    throw nb::value_error(
        fmt::format("{}: data is not {}-byte aligned", arg, dtype_size(t.dtype)).c_str());
  t.rank = int(a.ndim());
  for (int d = 0; d < t.rank; ++d) {
    t.shape[size_t(d)] = int64_t(a.shape(size_t(d)));
    t.stride[size_t(d)] = a.stride(size_t(d));  // elements, like Tensor
  }
  return t;
}

template <class Array>
ArrayRef host_array_ref(const Array& a, const char* arg) {
  const std::optional<DType> dt = engine_dtype(a.dtype());
  if (!dt)
    throw nb::type_error(
        fmt::format("{}: dtype {} is not accepted", arg, dtype_label(a.dtype())).c_str());
  if (a.device_type() != nb::device::cpu::value)
    throw nb::value_error(fmt::format("{}: lives on {}, expected host (cpu) memory", arg,
                                      device_label(a.device_type(), a.device_id()))
                              .c_str());
  ArrayRef r;
  r.dtype = *dt;
  int64_t step = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != step)
      throw nb::value_error(
          fmt::format("{}: must be contiguous (call .contiguous() first)", arg).c_str());
    step *= int64_t(a.shape(d));
  }
  for (size_t d = 0; d < a.ndim(); ++d) r.shape.push_back(int64_t(a.shape(d)));
  r.data = a.data();
  return r;
}

template Tensor tensor_view(const ReadArray&, const char*, std::initializer_list<DType>);
template ArrayRef host_array_ref(const ReadArray&, const char*);
template ArrayRef host_array_ref(const WriteArray&, const char*);
template Tensor tensor_view(const WriteArray&, const char*, std::initializer_list<DType>);

}  // namespace h3s::py
