// Argument checks shared by every backend: one line naming the op, the
// operand and expected vs found (docs/DESIGN.md, invariant 5).
#pragma once

#include <span>

#include "core/chunk_plan.hpp"
#include "core/tensor.hpp"
#include "model/packed_layout.hpp"
#include "model/quant_linear.hpp"

namespace h3s {
struct ModTable;
struct KvView;
struct KvI8sView;
}  // namespace h3s

namespace h3s::checks {

void expect_device(const Tensor& t, Device d, const char* op, const char* operand);
void expect_dtype(const Tensor& t, DType dt, Device d, const char* op, const char* operand);
// bf16 or f32.
void expect_float(const Tensor& t, Device d, const char* op, const char* operand);
void expect_rows(const Tensor& t, int64_t rows, const char* op, const char* operand);
void expect_cols(const Tensor& t, int64_t cols, const char* op, const char* operand);
// A 2-D [rows, cols] view (rank <= 2) whose columns are adjacent.
void expect_unit_col_stride(const Tensor& t, const char* op, const char* operand);
void expect_runs(std::span<const ModRun> runs, int64_t rows, int64_t mod_rows, const char* op);
// An attention call's keys: inside the `kv_rows` K/V rows, starting on a
// `tile`-key boundary (so a K/V block chains bit for bit).
void expect_attention_keys(RowRange keys, int64_t kv_rows, int64_t tile, const char* op);

// The arrays `w` computes with are on device d in that backend's kernel form
// (CPU: w4a8 decoded to int8; CUDA: w4a8 packed with its 16 levels): a weight
// that did not go through Backend::prepare fails here, naming the fix.
void expect_prepared(const QuantLinear& w, Device d, const char* op);

// The whole argument contract of an op (backend.hpp), identical on every backend.
// linear: returns `features` with an empty range resolved to all outputs.
RowRange linear_args(const Tensor& x, const QuantLinear& w, const Tensor& y, RowRange features,
                     Device d);
// attention: q [rows, heads * head_dim] bf16; K and V [seq, heads, head_dim]
// views with unit dim stride, both bf16 or both f16 (kvi8r's decoded K~/V~);
// keys inside them, on a kAttnKvTile boundary.
void attention_args(const Tensor& q, const KvView& kv, RowRange keys, int64_t rows, int64_t heads,
                    int64_t head_dim, Device d, const char* op);
void rms_norm_mod_args(const Tensor& x, const Tensor& gamma, const ModTable* mod,
                       std::span<const ModRun> runs, const Tensor& out, Device d);
// qk_norm_rope: t [rows, heads * 128] bf16, weight 128 contiguous bf16; with
// rot_dim > 0 (even, <= 128) rope [rows, rot_dim] bf16 as (cos, sin) pairs.
void qk_norm_rope_args(const Tensor& t, const Tensor& w, const Tensor& rope, int64_t rot_dim,
                       Device d);
// kvi8r (kvfmt/kvi8r.hpp): src [rows, heads * 128] bf16 -> code (i8, same
// shape) and scale [rows, heads] f16, every row with adjacent columns.
// Returns heads.
int64_t kvi8r_quantize_args(const Tensor& src, const Tensor& code, const Tensor& scale, Device d);
// The kvi8r store (codes [seq, heads * 128] i8, scales [seq, heads] f16, K
// and V sharing row strides and row counts) attended by q [rows, heads *
// 128] bf16 over `keys`.
void kvi8r_attention_args(const Tensor& q, int64_t rows, int64_t heads, const Tensor& k_code,
                          const Tensor& k_scale, const Tensor& v_code, const Tensor& v_scale,
                          RowRange keys, int64_t tile, Device d);
// That store alone (kvi8r_decode); returns seq.
int64_t kvi8r_store_args(const Tensor& k_code, const Tensor& k_scale, const Tensor& v_code,
                         const Tensor& v_scale, int64_t heads, Device d, const char* op);
// A decode path's outputs (Backend::kvi8r_decode, kvfp4s_decode): keys
// inside the store's kv_rows, k and v [keys.size(), heads, 128] views of
// dtype dt with unit dim stride.
void decoded_kv_args(RowRange keys, int64_t kv_rows, int64_t heads, const Tensor& k,
                     const Tensor& v, DType dt, Device d, const char* op);
// The kvi8s store (kvfmt/kvi8s.hpp, KvI8sView) of `heads` 128-dim heads: K
// codes [seq, heads * 128] i8, V^T codes [heads * 128, padded_seq(seq)]
// e4m3, headers [tiles * heads * kHeaderRows, 128] u8, columns adjacent.
// Returns seq.
int64_t kvi8s_store_args(const KvI8sView& kv, int64_t heads, Device d, const char* op);

}  // namespace h3s::checks
