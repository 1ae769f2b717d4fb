// What the kvi8r Hopper attention takes: the exact kernel's parameters (Q's
// TMA map, bf16; key range; state; the K/V maps unused) plus the int8 K and V
// codes its producers load from L2 and the per-key fp16 scales of K and V,
// key r of head h at r * scale_key + h * scale_head (the store's are
// head-major: scale_key 1, so a warp's 32 keys of one head are 64 contiguous
// bytes).
#pragma once

#include <cstdint>

#include "backend/cuda/attention/attn_ws_sm90_params.cuh"

namespace h3s::cuda::attn {

struct AttnI8rParams {
  AttnWsParams base;  // out is always null: the tier's finish un-rotates (kvi8r_finish_rotated)
  const uint16_t* k_scale;
  const uint16_t* v_scale;
  int64_t scale_key, scale_head;
  const uint8_t* k_code;  // [keys, code_stride bytes] (code + 128), head h at h * 128
  const uint8_t* v_code;
  int64_t code_stride;
};

}  // namespace h3s::cuda::attn
