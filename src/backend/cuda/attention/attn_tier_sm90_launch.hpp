// What the K/V tiers' Hopper launchers (attn_fwd_i8r_sm90.cu,
// attn_fwd_i8s_sm90.cu, attn_fwd_fp4s_sm90.cu) fill the same way: the exact
// kernel's parameters (AttnWsParams) from a tier's call. Host code.
#pragma once

#include <cstdint>
#include <string>

#include "backend/cuda/arch/tma_desc.hpp"
#include "backend/cuda/attention/attn_ws_sm90_params.cuh"

namespace h3s::cuda::attn {

// Q's map (bf16 [rows, heads, 128], 128-byte swizzled, a box per 64-dim half
// and kBlockM rows) and the state of `f` (a tier's FwdParams), which always
// ends stored: each tier finishes apart. The K/V maps are the tier's own.
template <class T, class F>
AttnWsParams tier_base(const F& f, bool fresh, const char* tier) {
  AttnWsParams b{};
  // Plain locals: nvcc's front end rejects braced lists of the template
  // parameter F's members as call arguments.
  const void* q = f.q;
  const uint64_t heads = uint64_t(f.heads), rows = uint64_t(f.rows);
  const uint64_t row_bytes = uint64_t(T::kHeadDim) * sizeof(uint16_t);
  const uint64_t ldq_bytes = uint64_t(f.ldq) * sizeof(uint16_t);
  const arch::Tensor3d q_tensor{q, {uint64_t(T::kHeadDim), heads, rows}, {row_bytes, ldq_bytes}};
  const uint32_t q_box[3] = {uint32_t(T::kHalfDims), 1, uint32_t(T::kBlockM)};
  b.q_map =
      arch::encode_bf16_swizzle128(q_tensor, q_box, (std::string(tier) + " attention q").c_str());
  b.rows = f.rows;
  b.heads = f.heads;
  b.key_begin = f.key_begin;
  b.key_end = f.key_end;
  b.m = f.m;
  b.l = f.l;
  b.acc = f.acc;
  b.out = nullptr;
  b.fresh = fresh;
  return b;
}

// kvfp4s' K and V code maps (its producers' TMA into the code ring; kvi8r's
// load their codes from L2): T::kCodeRowBytes of every head and key,
// unswizzled, a box a key tile.
template <class T, class F>
void code_maps(AttnWsParams& b, const F& f, const char* tier) {
  const void* k_code = f.k_code;
  const void* v_code = f.v_code;
  const uint64_t row = uint64_t(T::kCodeRowBytes), heads = uint64_t(f.heads);
  const uint64_t keys = uint64_t(f.key_end), stride = uint64_t(f.code_stride);
  const arch::Tensor3d k{k_code, {row, heads, keys}, {row, stride}};
  const arch::Tensor3d v{v_code, {row, heads, keys}, {row, stride}};
  const uint32_t box[3] = {uint32_t(T::kCodeRowBytes), 1, uint32_t(T::kBlockN)};
  b.k_map = arch::encode_u8(k, box, (std::string(tier) + " attention K codes").c_str());
  b.v_map = arch::encode_u8(v, box, (std::string(tier) + " attention V codes").c_str());
}

}  // namespace h3s::cuda::attn
