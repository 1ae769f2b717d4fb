// kvi8r, the first approximate K/V tier (docs/FEATURES.md "K/V storage tiers"):
// K and V rows int8 with one fp16 scale per (token, head), in a fixed
// orthonormal Hadamard-128 basis. This header is its definition of record:
// the exact arithmetic every backend's kvi8r path performs (the CPU backend
// runs exactly this; a GPU kernel reproduces it within a measured bound).
//
//   rotate(x)     the Sylvester-Hadamard transform of a 128-vector in fp32
//                 butterflies, stages 1, 2, 4, ..., 64, each (a, b) -> (a + b,
//                 a - b) in that order, then one multiply by 2^-3.5 (rounded
//                 to fp32). H / sqrt(128) is symmetric and orthonormal, so the
//                 same transform un-rotates.
//   quantise      x' = rotate(bf16 row); scale = f16 rounded UP of
//                 max|x'| / 127 * (1 + 2^-7) (so no code saturates); code =
//                 round-half-even(x' / scale), |code| <= 127. An all-zero row
//                 has scale 0 and codes 0. Stored biased: the byte code + 128
//                 (uint8), so a converter makes fp16 1024 + byte with one
//                 byte permute (the unbiased int8 cost an xor per 4 codes).
//   dequantise    k~ = fp16(code_k * scale_k), v~ = fp16(code_v * scale_v): the
//                 product is exact in fp32, then rounded once to fp16 (round to
//                 nearest even), which is what the Hopper kernel's converters
//                 write for its fp16 tensor-core operands.
//   attention     q' = bf16(rotate(q)) per head; per key tile of 128 from key 0
//                 (the exact path's schedule): x = q' . k~ in fp32, the
//                 dot in the CPU backend's fixed order (core/dot_f32.hpp
//                 dot_f32); the online softmax of the exact path (the scale
//                 log2(e) / sqrt(128) in its exponent, core/softmax_scale.hpp);
//                 o += p * v~.
//   finish        out = bf16(rotate(acc / l)): the output un-rotated once.
//
// Every step is per row (token, head) or per (query row, key tile from key
// 0), so chunking the queries or splitting the keys on tile boundaries never
// changes a bit: the tier's streamed block equals its stock block.
#pragma once

#include <cstdint>

namespace h3s::kvi8r {

inline constexpr int kDim = 128;
inline constexpr int kMaxCode = 127;
// 2^-3.5 = 1/sqrt(128) in fp32 (0x3db504f3): the Hadamard normalisation.
inline constexpr float kNorm = 0.0883883461356163f;

// In place, fp32, as above.
void rotate(float* v);

// fp32 -> fp16 bits, rounded toward +infinity (finite, non-negative input).
uint16_t f16_round_up(float f);

inline constexpr int kCodeBias = 128;  // stored byte = code + kCodeBias

// One (token, head) row of bf16 bits -> stored (biased) codes and the fp16
// scale bits.
// rotated = false quantises the row as it is: the plain per-row int8 recipe
// the tier improves on (h3s kvbench's baseline), not the tier.
void quantise_row(const uint16_t* bf16_row, uint8_t* code, uint16_t* scale_f16,
                  bool rotated = true);

// One head's K/V in the store, pointers at key 0 of that head: key r's stored codes
// at code + r * code_stride, its scale at scale[r * scale_stride].
struct HeadRows {
  const uint8_t* k_code;
  const uint16_t* k_scale;
  const uint8_t* v_code;
  const uint16_t* v_scale;
  int64_t code_stride, scale_stride;
};

// fp16(code * scale): one dequantised element from its stored byte (code +
// kCodeBias) and scale_f16 (fp16 bits), as fp16 bits (what a decode path
// writes) or as its fp32 value.
uint16_t dequantise_f16(uint8_t stored, uint16_t scale_f16);
float dequantise(uint8_t stored, uint16_t scale_f16);

// Scratch of attend_rows, kept by the caller (one per thread).
struct Scratch {
  float kt[128 * kDim], vt[128 * kDim], p[128], o[kDim];
};

// The attention of one (query row, head) over keys [begin, end) (begin on a
// 128-key tile), continuing the state (m, l, acc[128]): q_bf16 is the query
// in the store's basis (bf16, taken as fp32 of its values).
void attend_row(const uint16_t* q_bf16, const HeadRows& kv, int64_t begin, int64_t end, float& m,
                float& l, float* acc, Scratch& scratch);
// attend_row for n query rows at once (row i: q_bf16 + i * q_stride, its
// state at m[i * ml_stride], l[i * ml_stride], acc + i * acc_stride), each
// key tile dequantised once for all of them; every row's bits are attend_row's.
void attend_rows(const uint16_t* q_bf16, int64_t q_stride, int64_t n, const HeadRows& kv,
                 int64_t begin, int64_t end, float* m, float* l, int64_t ml_stride, float* acc,
                 int64_t acc_stride, Scratch& scratch);

}  // namespace h3s::kvi8r
