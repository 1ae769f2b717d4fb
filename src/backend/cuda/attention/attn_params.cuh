// What the attention forward kernels (attn_fwd_sm80.cu: mma.sync, any sm_80+;
// attn_fwd_ws_sm90.cu: wgmma and TMA, sm_90a) take, and the constants they
// must share so that either one continues the other's state arithmetic.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/attn_tile.hpp"
#include "core/softmax_scale.hpp"

namespace h3s::cuda::attn {

// h3s::kAttnKvTile (backend/attn_tile.hpp: K/V blocks start on multiples of
// it) as the kernels' int. Each kernel's key tile must divide it.
inline constexpr int kEngineKvTile = int(kAttnKvTile);

struct AttnScale {
  static constexpr int kHeadDim = 128;
  // Scores enter the softmax in log2 units: the raw q.k (fp32) times
  // kScoreLog2Scale = log2(e) / sqrt(128) (core/softmax_scale.hpp), folded
  // into the exponent's fma and taken once on a tile's max, as in the CPU
  // reference; the state's m is in the same units, so chained calls continue
  // the same arithmetic.
  static constexpr float kScoreLog2Scale = score_log2_scale(kHeadDim);
  static_assert(kScoreLog2Scale == h3s::kScoreLog2Scale, "the engine's head dim");
};

// The 16-bit type of K and V. f16 is kvi8r's decoded K~/V~ (the tier's
// decode path, backend/kv_tier_decode.hpp): the mma.sync kernel's fp16
// instance runs it, with q converted to fp16 (satfinite) and P rounded to
// fp16, the operands of the Hopper kvi8r kernel.
enum class KvType : uint8_t { bf16, f16 };

struct FwdParams {
  const uint16_t* q;
  int64_t ldq;
  int64_t rows;
  int64_t heads;
  const uint16_t* k;
  const uint16_t* v;
  int64_t kv_seq_stride;
  int64_t kv_head_stride;
  int64_t key_begin;
  int64_t key_end;
  float* m;
  float* l;
  float* acc;
  KvType kv_type = KvType::bf16;
};

// The two ends of a call's online-softmax state: `fresh` starts from
// (m, l, acc) = (-inf, 0, 0) without reading the state; `out` non-null ends
// by writing bf16(acc / l) to out (row stride ldo) instead of storing the
// state. A kernel without fused ends gets them from attention_reset and
// attention_finish around it: the same bits.
struct FwdEnds {
  bool fresh = false;
  uint16_t* out = nullptr;
  int64_t ldo = 0;
};

// The kvi8r tier's attention (kvfmt/kvi8r.hpp): q rotated bf16 as FwdParams';
// K and V int8 codes [keys, heads * 128] (row stride code_stride bytes) and
// fp16 scales, key r of head h at r * scale_key + h * scale_head (the store's
// are head-major: scale_key 1). The state always
// ends stored (the tier's finish un-rotates it: kvi8r_finish_rotated).
struct KvI8rFwdParams {
  const uint16_t* q;
  int64_t ldq;
  int64_t rows;
  int64_t heads;
  const uint8_t* k_code;  // stored biased: code + 128
  const uint8_t* v_code;
  int64_t code_stride;
  const uint16_t* k_scale;
  const uint16_t* v_scale;
  int64_t scale_key;
  int64_t scale_head;
  int64_t key_begin;
  int64_t key_end;
  float* m;
  float* l;
  float* acc;
};

// The kvi8s tier's attention (kvfmt/kvi8s.hpp): q rotated bf16 as FwdParams';
// K int8 codes [keys, heads * 128] (row stride code_stride bytes); V^T fp8
// codes [heads * 128, v_stride] (keys innermost, padded to whole tiles);
// header records [header_records, kvi8s::kHeaderRows, 128] bytes, (tile,
// head) at tile * heads + head. The state always ends stored
// (attention_finish gives the output: V is not rotated).
struct KvI8sFwdParams {
  const uint16_t* q;
  int64_t ldq;
  int64_t rows;
  int64_t heads;
  const int8_t* k_code;
  int64_t code_stride;
  const uint8_t* v_code;
  int64_t v_stride;
  const uint8_t* header;
  int64_t header_records;
  int64_t key_begin;
  int64_t key_end;
  float* m;
  float* l;
  float* acc;
};

// The kvfp4s tier's attention (kvfmt/kvfp4s.hpp): q rotated bf16 as FwdParams';
// K and V e2m1 codes [keys, heads * 64] (row stride code_stride bytes), e4m3
// scales [keys, heads * 8] (row stride scale_stride), per (256-key stat
// block, head) fp32 globals [blocks, global_stride] (bf16 values) and K's bf16
// means [blocks, mean_stride]. The state always ends stored.
struct KvFp4sFwdParams {
  const uint16_t* q;
  int64_t ldq;
  int64_t rows;
  int64_t heads;
  const uint8_t* k_code;
  const uint8_t* v_code;
  int64_t code_stride;
  const uint8_t* k_scale;
  const uint8_t* v_scale;
  int64_t scale_stride;
  const float* k_global;
  const float* v_global;
  int64_t global_stride;
  const uint16_t* k_mean;
  int64_t mean_stride;
  int64_t key_begin;
  int64_t key_end;
  float* m;
  float* l;
  float* acc;
};

// Launchers, one kernel each (kernel_choice.hpp names them; the variants
// that lost are in bench/results/experiments/removed_*_variants.diff).
// Callers (attn_dispatch.cpp) validate and check the device first.
// mma.sync, any sm_80+. slabs: the tile (1 or 2 m16 slabs a warp; the same
// bits), 0 for the device's (kernel_choice.hpp's attn_sm80_slabs); the GPU
// tests run both on any GPU.
void attention_fwd_sm80(const FwdParams& p, cudaStream_t s, int slabs = 0);
void attention_fwd_ws_sm90(const FwdParams& p, const FwdEnds& ends,
                           cudaStream_t s);  // warp-specialised, TMA (sm_90a)
void attention_fwd_kvi8r_sm90(const KvI8rFwdParams& p, bool fresh,
                              cudaStream_t s);  // the same with int8 K/V (sm_90a)
void attention_fwd_kvi8s_sm90(const KvI8sFwdParams& p,
                              cudaStream_t s);  // int8 QK, fp8 PV (sm_90a)
void attention_fwd_kvi8s_sm89(const KvI8sFwdParams& p,
                              cudaStream_t s);  // the same on mma.sync (sm_89+)
void attention_fwd_kvfp4s_sm90(const KvFp4sFwdParams& p,
                               cudaStream_t s);  // fp4 K/V decoded to bf16 (sm_90a)

}  // namespace h3s::cuda::attn
