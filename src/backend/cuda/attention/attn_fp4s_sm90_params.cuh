// What the kvfp4s Hopper attention takes: the exact kernel's parameters
// (TMA maps: Q bf16, K and V e2m1 code rows; key range; state) plus the
// per-key e4m3 scales and the per-(stat block, head) globals and K means.
#pragma once

#include <cstdint>

#include "backend/cuda/attention/attn_ws_sm90_params.cuh"

namespace h3s::cuda::attn {

struct AttnFp4sParams {
  AttnWsParams base;  // out is always null: the exact finish follows the last block
  const uint8_t* k_scale;
  const uint8_t* v_scale;
  int64_t scale_stride;  // bytes; head h's 8 scales at column 8 h
  const float* k_global;
  const float* v_global;
  int64_t global_stride;
  const uint16_t* k_mean;
  int64_t mean_stride;
};

}  // namespace h3s::cuda::attn
