// Which (query block, head) a CTA of the warp-specialised attention owns.
// A static schedule: query blocks vary fastest, so the CTAs resident at one
// time share a head and sweep its K/V in step through L2. (A persistent
// scheduler buys nothing here: a CTA runs thousands of key tiles at the
// lengths this kernel exists for, so its prologue and epilogue are < 0.1%.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace h3s::cuda::attn {

struct AttnWsTile {
  int64_t row0;  // first query row of the CTA's kBlockM
  int64_t head;
};

template <class T>
struct AttnWsStaticScheduler {
  static dim3 grid(int64_t rows, int64_t heads) {
    return dim3(unsigned((rows + T::kBlockM - 1) / T::kBlockM), unsigned(heads));
  }
  __device__ static AttnWsTile tile() {
    return {int64_t(blockIdx.x) * T::kBlockM, int64_t(blockIdx.y)};
  }
};

}  // namespace h3s::cuda::attn
