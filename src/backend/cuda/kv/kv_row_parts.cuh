// Row i of K or V given as KvRowParts (a kept tail, then the chunk): the
// quantisers of the grouped tiers (kvi8s, kvfp4s) read a group's rows through
// it whichever part they sit in.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {

template <int HeadDim>
struct KvRowPartsView {
  KvRowParts in;
  __device__ const uint16_t* k(int64_t i, int64_t h) const {
    return i < in.rows[0] ? in.k[0] + i * in.ldk[0] + h * HeadDim
                          : in.k[1] + (i - in.rows[0]) * in.ldk[1] + h * HeadDim;
  }
  __device__ const uint16_t* v(int64_t i, int64_t h) const {
    return i < in.rows[0] ? in.v[0] + i * in.ldv[0] + h * HeadDim
                          : in.v[1] + (i - in.rows[0]) * in.ldv[1] + h * HeadDim;
  }
};

}  // namespace h3s::cuda
