// DLPack arrays (nanobind's nb::ndarray: torch, numpy, anything with
// __dlpack__) as engine Tensor views: the pointer, shape and strides of the
// caller's memory, never a copy.
#pragma once

#include <nanobind/ndarray.h>

#include <initializer_list>
#include <optional>
#include <string>

#include "core/tensor.hpp"
#include "h3s/array.hpp"

namespace h3s::py {

namespace nb = nanobind;

// Unconstrained arrays: nanobind converts nothing, so whatever the caller
// passed is what we see (and checks name it). ReadArray also takes read-only
// producers (weights); WriteArray is updated in place (x).
using ReadArray = nb::ndarray<nb::ro>;
using WriteArray = nb::ndarray<>;

// "bfloat16", "float32", "int8", ... (numpy/torch spelling) for messages.
std::string dtype_label(nb::dlpack::dtype d);
// The engine dtype of a DLPack dtype; nullopt when the engine has none.
std::optional<DType> engine_dtype(nb::dlpack::dtype d);
// The safetensors dtype name ("BF16", "F8_E4M3", ...); nullopt when none.
std::optional<std::string> safetensors_dtype(nb::dlpack::dtype d);
// "cpu", "cuda:1", ... for messages.
std::string device_label(int device_type, int device_id);

// A view of `a` (rank 1..4, CPU or CUDA memory) for the engine. Raises
// TypeError when its dtype is not one of `dtypes`, ValueError for a rank
// above 4, an unsupported device or a misaligned pointer; shape, device and
// contiguity against what an op needs are checked by the engine.
template <class Array>
Tensor tensor_view(const Array& a, const char* arg, std::initializer_list<DType> dtypes);

// A C-contiguous host array as the public API's view (the forward's inputs and
// outputs): TypeError for a dtype the engine has no type for, ValueError for
// device memory or a non-contiguous array.
template <class Array>
ArrayRef host_array_ref(const Array& a, const char* arg);

}  // namespace h3s::py
