// kvi8s, the SageAttention-2-style K/V tier (FEATURES.md "K/V storage
// tiers"): int8 Q and K, fp8 e4m3 V and P. This header is its definition of
// record: the arithmetic every backend's kvi8s path performs (the CPU
// backend runs exactly this; a GPU kernel on int8/fp8 tensor cores reproduces
// it within a measured bound). Quantisation groups sit at absolute token
// positions, so nothing depends on where a chunk starts.
//
//   blocks        tokens [64 b, 64 b + 64) of the sequence, from token 0 (the
//                 last one may be shorter); per (block, head):
//   K             k' = rotate(k) (kvi8r's Hadamard-128, fp32); mean[d] =
//                 bf16(sum_t k'_t[d] / n) (fp32 sum in token order); r = k' -
//                 mean; scale = max|r| / 127 * (1 + 2^-7) (fp32, so no code
//                 saturates); code = round-half-even(r / scale).
//   V             per channel d: scale[d] = max_t |v_t[d]| / 448 * (1 + 2^-7)
//                 (fp32); code = e4m3(v / scale[d]). V is not rotated.
//   Q             per (row, head), in the rotated basis rotate_heads leaves
//                 (q' = bf16(rotate(q))): scale = max|q'| / 127 * (1 + 2^-7),
//                 code = round-half-even(q' / scale).
//   scores        s = (float(q_code . k_code) * (scale_q * scale_k[b]) +
//                 q' . mean[b]) * 1/sqrt(128): the int8 dot is exact in int32,
//                 the mean's term (the per-block smoothing, put back) is an fp32
//                 dot in the CPU backend's fixed order (cpu/math.hpp dot_f32).
//   softmax       per key tile of 128 from key 0 (the exact path's schedule):
//                 m, alpha, p = exp(s - m_new) and l as the exact path.
//   P V           two levels: per block b inside the tile, o_b[d] = sum_t
//                 e4m3(p_t * 448) * v_code_t[d] in fp32, token order; then
//                 t[d] = sum_b o_b[d] * scale_v[b][d] in block order, and
//                 acc[d] = acc[d] * alpha + t[d] * (1/448).
//   finish        the exact path's: out = bf16(acc / l).
#pragma once

#include <cstdint>

namespace h3s::kvi8s {

inline constexpr int kDim = 128;
inline constexpr int64_t kBlock = 64;  // tokens per quantisation block
inline constexpr int kMaxCode = 127;
inline constexpr float kE4m3Max = 448.0f;
// P in [0, 1] is stored as e4m3(p * 448): its largest value uses fp8's range.
inline constexpr float kPScale = 448.0f;
inline constexpr float kInvPScale = 1.0f / kPScale;

// Rows in [seq, heads * 128] layouts: `stride` elements from one token's row
// to the next; each pointer is at the head's first element.

// K of one (block, head): n <= kBlock rows of bf16 bits -> codes, the fp32
// scale and the bf16 mean (128 values). rotated = false skips the Hadamard
// basis: the plain SageAttention-2 recipe (h3s kvbench's baseline).
void quantise_k_block(const uint16_t* src, int64_t src_stride, int64_t n, int8_t* code,
                      int64_t code_stride, float* scale, uint16_t* mean, bool rotated = true);
// V of one (block, head): n rows -> e4m3 codes and 128 fp32 channel scales.
void quantise_v_block(const uint16_t* src, int64_t src_stride, int64_t n, uint8_t* code,
                      int64_t code_stride, float* scale);
// One rotated query row (bf16 bits) -> codes; returns the fp32 scale.
float quantise_q_row(const uint16_t* q_rot, int8_t* code);
// The exact int32 dot of two 128-code rows.
int32_t dot_codes(const int8_t* a, const int8_t* b);
// One head's K/V in the store, pointers at token / block 0 of that head:
// token r's codes at code + r * code_stride, block b's K scale at
// k_scale[b * k_scale_stride], its K mean and V channel scales at
// + b * block_stride.
struct HeadRows {
  const int8_t* k_code;
  const uint8_t* v_code;
  const float* k_scale;
  const uint16_t* k_mean;
  const float* v_scale;
  int64_t code_stride, k_scale_stride, block_stride;
};

// The attention of one (query row, head) over keys [begin, end) (begin on a
// 128-key tile), continuing the state (m, l, acc[128]): q_bf16 is the query
// in the store's basis (rotate_heads' output for the tier).
void attend_row(const uint16_t* q_bf16, const HeadRows& kv, int64_t begin, int64_t end, float& m,
                float& l, float* acc);

// Store bytes per tier for `seq` rows: codes (1 byte an element) for K and
// V, and per (block, head) K's scale (fp32) and mean (bf16 x 128) and V's
// channel scales (fp32 x 128).
int64_t store_bytes(int64_t seq, int64_t heads);

}  // namespace h3s::kvi8s
