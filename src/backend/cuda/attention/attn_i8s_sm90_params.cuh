// What the kvi8s Hopper attention takes: the exact kernel's parameters
// (TMA maps: Q bf16 rotated, K int8 codes, V^T fp8 codes; key range; state)
// plus two maps over the store's header records (kvfmt/kvi8s.hpp): their K rows
// (mean digits and scales) and their V rows (channel scales).
#pragma once

#include <cuda.h>

#include "backend/cuda/attention/attn_ws_sm90_params.cuh"

namespace h3s::cuda::attn {

struct AttnI8sParams {
  AttnWsParams base;  // k_map: K codes; v_map: V^T codes (keys innermost)
  CUtensorMap header_k_map;
  CUtensorMap header_v_map;
};

}  // namespace h3s::cuda::attn
