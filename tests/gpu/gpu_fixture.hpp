// GPU test set-up: skip cleanly without a device; device arenas; host <-> device helpers.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_memory.hpp"

namespace h3s::test {

inline bool cuda_device_present() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define H3S_REQUIRE_GPU()                                                      \
  do {                                                                         \
    if (!::h3s::test::cuda_device_present()) GTEST_SKIP() << "no CUDA device"; \
  } while (0)

}  // namespace h3s::test
