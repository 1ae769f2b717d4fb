// kvfp4s, the NVFP4 K/V tier (docs/FEATURES.md "K/V storage tiers"): K and V as
// e2m1 codes with an e4m3 scale per 16 elements. This header is its
// definition of record: the CPU backend runs exactly this, and the Hopper
// kernel (attn_fwd_fp4s_sm90.cu: Hopper has no fp4 tensor cores) decodes the
// codes to the same bf16 K~ and V~ in shared memory, then runs the exact
// kernel's bf16 arithmetic on them. Groups sit at absolute token positions,
// so nothing depends on where a chunk starts.
//
//   stat blocks   tokens [256 b, 256 b + 256) from token 0 (the last may be
//                 shorter); per (block, head) a K mean and one global scale
//                 each for K and V (the NVFP4 "tensor" scale, per block so
//                 that no statistic spans the sequence).
//   K             k' = rotate(k) (kvi8r's Hadamard-128, fp32); mean[d] =
//                 bf16(sum_t k'_t[d] / n) (fp32 sum in token order); r = k' -
//                 mean; then NVFP4 of r (below).
//   V             NVFP4 of v (not rotated).
//   NVFP4 of x    global g = max|x| over the block / (448 * 6), rounded UP to
//                 a bf16 value (held in fp32; so the decode below is one
//                 bf16 fma); per token and group of 16 channels: s =
//                 e4m3(min(max|x_group| / 6 / g, 448)), step = float(s) * g,
//                 code = e2m1(x / step) (0 when step is 0); x^ = e2m1(code) *
//                 float(s), exact in bf16 (at most 2 + 4 significant bits).
//                 As our NVFP4 weights: the even element in the high nibble.
//   decode        k~ = bf16(x^ * g_k + mean[d]), v~ = bf16(x^ * g_v), each
//                 rounded once (RNE) from the exact value: what fma.rn.bf16x2
//                 and mul.rn.bf16x2 give the kernel.
//   Q             the rotated bf16 query rotate_heads leaves (q' =
//                 bf16(rotate(q))), used as is (bf16 operand).
//   attention     per key tile of 128 from key 0 (the exact path's schedule;
//                 a tile lies in one stat block): x = q' . k~ in fp32, the
//                 dot in the CPU backend's fixed order (core/dot_f32.hpp
//                 dot_f32); the online softmax of the exact path (the scale
//                 log2(e) / sqrt(128) in its exponent, core/softmax_scale.hpp);
//                 o += p * v~.
//   finish        the exact path's: out = bf16(acc / l) (V is not rotated).
// Bytes per K/V element: 0.5 (codes) + 1/16 (scales) + the per-block mean and
// globals (K: 2 * 128 + 4 bytes per 256 x 128 elements, V: 4): ~0.5665.
#pragma once

#include <cstdint>

namespace h3s::kvfp4s {

inline constexpr int kDim = 128;
inline constexpr int kGroup = 16;              // elements per e4m3 scale
inline constexpr int kGroups = kDim / kGroup;  // scales per token and head
inline constexpr int64_t kBlock = 256;         // tokens per stat block
inline constexpr float kE2m1Max = 6.0f;
inline constexpr float kE4m3Max = 448.0f;

// One (stat block, head) of n <= kBlock rows of bf16 bits, rows `src_stride`
// elements apart. Outputs per token r: kDim / 2 code bytes at code + r *
// code_stride and kGroups e4m3 scales at scale + r * scale_stride; per block
// the global (and K's bf16 mean, 128 values). centred = false skips K's mean
// (zeros; h3s kvbench's baseline: rotated NVFP4 without centring); rotated =
// false skips the Hadamard basis.
void quantise_k_block(const uint16_t* src, int64_t src_stride, int64_t n, uint8_t* code,
                      int64_t code_stride, uint8_t* scale, int64_t scale_stride, float* global,
                      uint16_t* mean, bool centred = true, bool rotated = true);
void quantise_v_block(const uint16_t* src, int64_t src_stride, int64_t n, uint8_t* code,
                      int64_t code_stride, uint8_t* scale, int64_t scale_stride, float* global);
// Decodes one token's codes and scales to x^ (without the global).
void decode_row(const uint8_t* code, const uint8_t* scale, float* out);
// k~ (mean: the block's 128 bf16 means) or v~ (mean null) of one token, as
// fp32 values of the bf16 results.
void decode_kv_row(const uint8_t* code, const uint8_t* scale, float global, const uint16_t* mean,
                   float* out);
// The block global of amax: amax / (448 * 6) rounded up to a bf16 value.
float global_of(float amax);
// bf16 bits of x * g + c rounded once from the exact value (x, g, c with at
// most 24 significant bits each and x * g exact in double).
uint16_t bf16_fma_rn(float x, float g, float c);

// One head's K/V, pointers at token / block 0 of that head: token r's codes
// at + r * code_stride, its scales at + r * scale_stride; block b's globals
// at + b * global_stride, its K mean at k_mean + b * mean_stride.
struct HeadRows {
  const uint8_t *k_code, *k_scale, *v_code, *v_scale;
  const float *k_global, *v_global;
  const uint16_t* k_mean;
  int64_t code_stride, scale_stride, global_stride, mean_stride;
};

// Scratch of attend_row, kept by the caller (one per thread).
struct Scratch {
  float kt[128 * kDim], vt[128 * kDim], p[128], o[kDim];
};

// The attention of one (query row, head) over keys [begin, end) (begin on a
// 128-key tile), continuing the state (m, l, acc[128]); q_bf16 is the query
// in the store's basis (rotated; unrotated for a store made with rotated =
// false).
void attend_row(const uint16_t* q_bf16, const HeadRows& kv, int64_t begin, int64_t end, float& m,
                float& l, float* acc, Scratch& scratch);

// attend_row for n query rows at once (row i: q_bf16 + i * q_stride, its
// state m[i * ml_stride], l[i * ml_stride], acc + i * acc_stride): each key
// tile decoded once for all of them; every row's bits are attend_row's.
void attend_rows(const uint16_t* q_bf16, int64_t q_stride, int64_t n, const HeadRows& kv,
                 int64_t begin, int64_t end, float* m, float* l, int64_t ml_stride, float* acc,
                 int64_t acc_stride, Scratch& scratch);

// Store bytes of the tier for `seq` rows: codes and scales of K and V, per
// (stat block, head) K's mean and both globals.
int64_t store_bytes(int64_t seq, int64_t heads);

}  // namespace h3s::kvfp4s
