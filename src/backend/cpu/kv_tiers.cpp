// The approximate K/V tiers on the CPU backend: the definition of record
// (kvfmt/kvi8r.hpp), row by row, on the thread pool. Attention follows the
// exact path's schedule (attention.cpp): keys in kAttnKvTile tiles from key
// 0, each (query row, head) on its own state (a task takes a block of rows
// to dequantise each tile once), so blocked keys and chunked queries repeat
// the single pass bit for bit.
#include <algorithm>
#include <cmath>
#include <memory>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/kv_block_rows.hpp"
#include "backend/op_checks.hpp"
#include "kvfmt/kvi8r.hpp"

namespace h3s::cpu {

namespace {

constexpr int64_t kHd = kvi8r::kDim;
static_assert(kAttnKvTile == 128, "kvi8r::attend_rows walks the exact path's 128-key tiles");

void expect_heads(const Tensor& t, const char* op, const char* operand) {
  expect_unit_col_stride(t, op, operand);
  if (t.cols() % kHd != 0)
    fail(ErrorKind::invalid_argument, "{}: {} has {} columns, not whole {}-dim heads", op, operand,
         t.cols(), kHd);
}

}  // namespace

void CpuBackend::kvi8r_quantize(const Tensor& src, const Tensor& code, const Tensor& scale) {
  const int64_t rows = src.rows(),
                heads = checks::kvi8r_quantize_args(src, code, scale, Device::host);
  pool_.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < heads; ++h)
        kvi8r::quantise_row(src.row<uint16_t>(r) + h * kHd, code.row<uint8_t>(r) + h * kHd,
                            scale.row<uint16_t>(r) + h * scale.stride[1]);
  });
}

void CpuBackend::rotate_heads(const Tensor& t) {
  const char* op = "rotate_heads";
  expect_dtype(t, DType::bf16, op, "t");
  expect_heads(t, op, "t");
  const int64_t heads = t.cols() / kHd;
  pool_.parallel_for(t.rows(), 16, [&](int64_t r0, int64_t r1) {
    float v[kHd];
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        uint16_t* x = t.row<uint16_t>(r) + h * kHd;
        for (int64_t d = 0; d < kHd; ++d) v[d] = bf16_to_f32(bf16{x[d]});
        kvi8r::rotate(v);
        for (int64_t d = 0; d < kHd; ++d) x[d] = f32_to_bf16(v[d]).bits;
      }
  });
}

void CpuBackend::kvi8r_decode(const KvI8View& kv, RowRange keys, const Tensor& k, const Tensor& v) {
  const char* op = "kvi8r_decode";
  const int64_t heads = kv.k_code.cols() / kHd;
  checks::kvi8r_store_args(kv.k_code, kv.k_scale, kv.v_code, kv.v_scale, heads, Device::host, op);
  checks::decoded_kv_args(keys, kv.rows(), heads, k, v, DType::f16, Device::host, op);
  pool_.parallel_for(keys.size(), 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t key = keys.begin + r;
      for (int64_t h = 0; h < heads; ++h)
        for (const bool keys_not_values : {true, false}) {
          const uint8_t* code =
              (keys_not_values ? kv.k_code : kv.v_code).row<uint8_t>(key) + h * kHd;
          const Tensor& scale = keys_not_values ? kv.k_scale : kv.v_scale;
          const uint16_t s = scale.ptr<uint16_t>()[key * scale.stride[0] + h * scale.stride[1]];
          const Tensor& out = keys_not_values ? k : v;
          uint16_t* dst = out.ptr<uint16_t>() + r * out.stride[0] + h * out.stride[1];
          for (int64_t d = 0; d < kHd; ++d) dst[d] = kvi8r::dequantise_f16(code[d], s);
        }
    }
  });
}

void CpuBackend::attention_kvi8r(const Tensor& q, const KvI8View& kv, RowRange keys, AttnState& s) {
  const char* op = "attention_kvi8r";
  const int64_t heads = s.heads, rows = q.rows();
  if (s.head_dim != kHd)
    fail(ErrorKind::invalid_argument, "{}: head_dim {} (kvi8r rotates {}-dim heads)", op,
         s.head_dim, kHd);
  checks::kvi8r_attention_args(q, s.rows, heads, kv.k_code, kv.k_scale, kv.v_code, kv.v_scale, keys,
                               kAttnKvTile, Device::host);
  for_each_head_rows<kvi8r::Scratch>(
      pool_, heads, rows, [&](int64_t h, int64_t r0, int64_t n, kvi8r::Scratch& scratch) {
        const kvi8r::HeadRows head{kv.k_code.row<uint8_t>(0) + h * kHd,
                                   kv.k_scale.row<uint16_t>(0) + h * kv.k_scale.stride[1],
                                   kv.v_code.row<uint8_t>(0) + h * kHd,
                                   kv.v_scale.row<uint16_t>(0) + h * kv.v_scale.stride[1],
                                   kv.k_code.row_stride(),
                                   kv.k_scale.row_stride()};
        const int64_t at = r0 * heads + h;
        kvi8r::attend_rows(q.row<uint16_t>(r0) + h * kHd, q.row_stride(), n, head, keys.begin,
                           keys.end, s.m.view.ptr<float>() + at, s.l.view.ptr<float>() + at, heads,
                           s.acc.view.ptr<float>() + at * kHd, heads * kHd, scratch);
      });
}

void CpuBackend::attn_state_finish_rotated(const AttnState& s, const Tensor& out) {
  const char* op = "attn_state_finish_rotated";
  expect_dtype(out, DType::bf16, op, "out");
  expect_rows(out, s.rows, op, "out");
  expect_cols(out, s.heads * s.head_dim, op, "out");
  expect_unit_col_stride(out, op, "out");
  if (s.head_dim != kHd)
    fail(ErrorKind::invalid_argument, "{}: head_dim {} (kvi8r rotates {}-dim heads)", op,
         s.head_dim, kHd);
  const int64_t heads = s.heads;
  pool_.parallel_for(s.rows, 16, [&](int64_t r0, int64_t r1) {
    float y[kHd];
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const float l = s.l.view.ptr<float>()[r * heads + h];
        const float* acc = s.acc.view.ptr<float>() + (r * heads + h) * kHd;
        for (int64_t d = 0; d < kHd; ++d) y[d] = acc[d] / l;
        kvi8r::rotate(y);
        uint16_t* o = out.row<uint16_t>(r) + h * kHd;
        for (int64_t d = 0; d < kHd; ++d) o[d] = f32_to_bf16(y[d]).bits;
      }
  });
}

}  // namespace h3s::cpu
