// What the warp-specialised Hopper attention forward takes: TMA descriptors
// of Q, K and V (built per call by its launcher), the key range, and the two
// ends of the online-softmax state: start fresh or from global fp32 (m, l,
// acc), and end by storing that state (more K/V blocks follow) or by writing
// O = bf16(acc / l) (the last block), bit-equal to attention_finish.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace h3s::cuda::attn {

struct AttnWsParams {
  // Rank-3 maps, innermost first: Q (dims, heads, rows), K and V (dims,
  // heads, keys up to key_end: boxes past it are zero-filled and masked).
  CUtensorMap q_map;
  CUtensorMap k_map;
  CUtensorMap v_map;
  int64_t rows;
  int64_t heads;
  int64_t key_begin;
  int64_t key_end;
  float* m;  // [rows * heads]; read unless fresh, written unless out
  float* l;
  float* acc;     // [rows * heads * 128]
  uint16_t* out;  // non-null: finish into out[row * ldo + head * 128 + dim]
  int64_t ldo;
  bool fresh;  // start from (m, l, acc) = (-inf, 0, 0) without reading
};

}  // namespace h3s::cuda::attn
