// kvi8s, the SageAttention-2-style K/V tier (docs/FEATURES.md "K/V
// storage tiers"): int8 Q and K, fp8 e4m3 V and P. This header is its definition of
// record: the arithmetic every backend's kvi8s path performs (the CPU
// backend runs exactly this; the Hopper kernel, attn_fwd_i8s_sm90.cu, runs it
// on int8 and fp8 tensor cores and differs only in the order of its fp32
// sums, in ex2.approx and in the rounding of the exponent's argument (one
// fma from the int32 dot, the shift folded in), within a measured bound).
// Quantisation groups sit at absolute token positions, so nothing depends on
// where a chunk starts.
//
//   tiles         tokens [128 T, 128 T + 128) from token 0: the attention's
//                 key tile, V's scale group; two 64-token K blocks b each.
//   K             per (block, head): k' = rotate(k) (kvi8r's Hadamard-128,
//                 fp32); mu[d] = sum_t k'_t[d] / n (fp32, token order); the
//                 mean is kept as 16-bit fixed point: m_scale = max|mu| /
//                 kMeanMax * (1 + 2^-7), m16 = rne(mu / m_scale), stored as
//                 int8 digits hi = floor((m16 + 128) / 256), lo = m16 - 256 hi
//                 (so the kernel gets q . m16 from the same int8 MMA as q . k);
//                 r = k' - float(m16) * m_scale; scale = max|r| / 127 *
//                 (1 + 2^-7) (no code saturates); code = rne(r / scale).
//   V             per (tile, head, channel d): s_v = max_t |v_t[d]| / 448 *
//                 (1 + 2^-7), code = e4m3(v / s_v); the store keeps vs[d] =
//                 s_v * 2^-8 (P's scale folded in, exactly). V is not rotated.
//   Q             per (row, head), in the rotated basis rotate_heads leaves
//                 (q' = bf16(rotate(q))): scale = max|q'| / 127 * (1 + 2^-7),
//                 code = rne(q' / scale).
//   scores        per key tile, for the key's block b: dq = q_code . k_code and
//                 dm = 256 (q_code . hi_b) + q_code . lo_b (exact int32);
//                 qk_b = (scale_q * scale_k[b]) * c, mc_b = (scale_q *
//                 m_scale[b]) * c, c = log2(e) / sqrt(128) (the exact path's
//                 kScoreLog2Scale; fp32, left to right);
//                 s = fma(float(dq), qk_b, float(dm) * mc_b), in log2 units.
//   softmax       per key tile of 128 from key 0 (the exact path's schedule):
//                 m (log2 units), alpha, p = 2^(s - m_new) and l as the
//                 exact path.
//   P V           o[d] = sum_t e4m3(p_t * 256) * v_code_t[d] in fp32 over the
//                 tile's keys in order, then acc[d] = fma(o[d], vs[d],
//                 acc[d] * alpha): the tile's fp8 products summed apart from
//                 the running fp32 accumulator (the kernel's two levels).
//   finish        the exact path's: out = bf16(acc / l).
//
// The store (KvI8sView): K codes [seq, heads * 128] as token rows; V codes
// transposed, [heads * 128, padded_seq(seq)], each channel's keys in a
// tile's order permuted within groups of 32 (v_position: the order in which
// the kernel's P registers hold the keys, so P feeds the fp8 MMA as it is);
// and one header record of kHeaderRows x 128 bytes per (tile, head).
#pragma once

#include <cstdint>
#include <cstring>

namespace h3s::kvi8s {

inline constexpr int kDim = 128;
inline constexpr int64_t kBlock = 64;  // tokens per K quantisation block
inline constexpr int64_t kTile = 128;  // tokens per V scale group = attention key tile
inline constexpr int kBlocksPerTile = int(kTile / kBlock);
inline constexpr int kMaxCode = 127;
inline constexpr float kE4m3Max = 448.0f;
// P in [0, 1] is stored as e4m3(p * 256): a power of two, so folding it into
// V's scale is exact.
inline constexpr float kPScale = 256.0f;
inline constexpr float kInvPScale = 1.0f / kPScale;
// Largest |m16| of a block mean: hi and lo then both fit int8.
inline constexpr int kMeanMax = 127 * 256;

// The header record of one (tile, head): rows of kDim bytes.
//   row 2b      block b's mean digits hi (int8 x 128)
//   row 2b + 1  block b's mean digits lo (int8 x 128)
//   row 4       fp32 [k_scale[0], k_scale[1], m_scale[0], m_scale[1]], zeros
//   rows 5-8    fp32 vs[128] (V's channel scales with P's 2^-8)
// A tile's missing second block (the sequence's end) has zero digits and scales.
inline constexpr int kRowScales = 2 * kBlocksPerTile;
inline constexpr int kRowVScale = kRowScales + 1;
inline constexpr int kHeaderRows = kRowVScale + kDim * 4 / kDim;  // 9
inline constexpr int64_t kHeaderBytes = int64_t(kHeaderRows) * kDim;

inline float header_float(const uint8_t* header, int row, int i) {
  float f;
  std::memcpy(&f, header + row * kDim + i * 4, 4);
  return f;
}
inline float k_scale(const uint8_t* header, int b) {
  return header_float(header, kRowScales, b);
}
inline float m_scale(const uint8_t* header, int b) {
  return header_float(header, kRowScales, kBlocksPerTile + b);
}
inline float v_scale(const uint8_t* header, int d) {
  return header_float(header, kRowVScale, 0 + d);
}

// Tokens rounded up to whole tiles: the width of V's transposed rows.
inline constexpr int64_t padded_seq(int64_t seq) {
  return (seq + kTile - 1) / kTile * kTile;
}
inline constexpr int64_t tiles(int64_t seq) {
  return padded_seq(seq) / kTile;
}

// Where token j of a tile sits in V's transposed row. The kernel's P
// registers hold, in the fp8 A-fragment slot 4t + i of a 16-key half, the
// score of key {2t, 2t + 1, 8 + 2t, 9 + 2t}[i] (the fp32 accumulator
// layout); storing key x at slot 4 ((x & 7) >> 1) + 2 (x >> 3) + (x & 1)
// makes the slots' keys and V's rows agree.
inline constexpr int64_t v_position(int64_t j) {
  const int64_t x = j & 15;
  return (j & ~int64_t(15)) + 4 * ((x & 7) >> 1) + 2 * (x >> 3) + (x & 1);
}

// One tile of one head: n <= kTile rows of bf16 K and V (`src_stride`
// elements apart) -> K codes (row t at k_code + t * code_stride), V codes
// (channel d's tile at v_code + d * v_stride, all kTile positions written,
// zero past n) and the header record. rotated = false skips the Hadamard
// basis: the plain SageAttention-2 recipe (h3s kvbench's baseline).
void quantise_tile(const uint16_t* k, const uint16_t* v, int64_t src_stride, int64_t n,
                   int8_t* k_code, int64_t code_stride, uint8_t* v_code, int64_t v_stride,
                   uint8_t* header, bool rotated = true);
// One rotated query row (bf16 bits) -> codes; returns the fp32 scale.
float quantise_q_row(const uint16_t* q_rot, int8_t* code);
// The exact int32 dot of two 128-code rows.
int32_t dot_codes(const int8_t* a, const int8_t* b);

// One head's K/V in the store, pointers at token / tile 0 of that head.
struct HeadRows {
  const int8_t* k_code;
  int64_t code_stride;  // token r's K codes at k_code + r * code_stride
  const uint8_t* v_code;
  int64_t v_stride;  // channel d's transposed row at v_code + d * v_stride
  const uint8_t* header;
  int64_t header_stride;  // tile T's record at header + T * header_stride
};

// The attention of one (query row, head) over keys [begin, end) (begin on a
// 128-key tile), continuing the state (m, l, acc[128]): q_bf16 is the query
// in the store's basis (rotate_heads' output for the tier).
void attend_row(const uint16_t* q_bf16, const HeadRows& kv, int64_t begin, int64_t end, float& m,
                float& l, float* acc);

// Store bytes for `seq` rows: K codes, V codes over padded rows, headers.
int64_t store_bytes(int64_t seq, int64_t heads);

}  // namespace h3s::kvi8s
