// Exact attention forward with an explicit online-softmax state.
//
// Keys are consumed in kAttnKvTile-row tiles counted from key 0; within a
// tile every score, exponent and sum is a fixed sequence of fp32 operations
// per (query row, head). Consuming K/V in blocks whose boundaries fall on tile
// boundaries therefore repeats the single-pass arithmetic exactly.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/op_checks.hpp"
#include "core/dtype.hpp"
#include "core/online_softmax.hpp"

namespace h3s::cpu {

namespace {
constexpr int64_t kQueryBlock = 16;  // query rows sharing one converted K/V tile

// n 16-bit values (fp16 or bf16 bits) as fp32.
void widen_row(const uint16_t* src, float* dst, int64_t n, bool f16) {
  if (f16)
    for (int64_t d = 0; d < n; ++d) dst[d] = f16_to_f32(src[d]);
  else
    for (int64_t d = 0; d < n; ++d) dst[d] = bf16_to_f32(bf16{src[d]});
}
}  // namespace

void CpuBackend::attn_state_reset(AttnState& s) {
  std::fill_n(s.m.view.ptr<float>(), s.rows * s.heads, -std::numeric_limits<float>::infinity());
  std::fill_n(s.l.view.ptr<float>(), s.rows * s.heads, 0.0f);
  std::fill_n(s.acc.view.ptr<float>(), s.rows * s.heads * s.head_dim, 0.0f);
}

void CpuBackend::attention(const Tensor& q, const KvView& kv, RowRange keys, AttnState& s) {
  const int64_t hd = s.head_dim, heads = s.heads, rows = q.rows();
  checks::attention_args(q, kv, keys, s.rows, heads, hd, Device::host, "attention");
  // fp16 K/V (kvi8r's decoded K~/V~) enter as their fp32 values, as kvi8r's
  // attend_rows takes them: the decode path's bits are the tier's.
  const bool kv_f16 = kv.k.dtype == DType::f16;
  const float c = score_log2_scale(hd);  // the scale, folded into the exponent
  const int64_t qblocks = (rows + kQueryBlock - 1) / kQueryBlock;
  pool_.parallel_for(heads * qblocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> kt(static_cast<size_t>(kAttnKvTile * hd)),
        vt(static_cast<size_t>(kAttnKvTile * hd));
    std::vector<float> qf(static_cast<size_t>(kQueryBlock * hd)),
        p(static_cast<size_t>(kAttnKvTile)), o(static_cast<size_t>(hd));
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task / qblocks, r0 = task % qblocks * kQueryBlock;
      const int64_t r1 = std::min(rows, r0 + kQueryBlock);
      for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* src = q.row<uint16_t>(r) + h * hd;
        for (int64_t d = 0; d < hd; ++d) qf[size_t((r - r0) * hd + d)] = bf16_to_f32(bf16{src[d]});
      }
      for (int64_t k0 = keys.begin; k0 < keys.end; k0 += kAttnKvTile) {
        const int64_t n = std::min(kAttnKvTile, keys.end - k0);
        for (int64_t j = 0; j < n; ++j) {
          const uint16_t* ks =
              kv.k.ptr<uint16_t>() + (k0 + j) * kv.k.stride[0] + h * kv.k.stride[1];
          const uint16_t* vs =
              kv.v.ptr<uint16_t>() + (k0 + j) * kv.v.stride[0] + h * kv.v.stride[1];
          widen_row(ks, kt.data() + j * hd, hd, kv_f16);
          widen_row(vs, vt.data() + j * hd, hd, kv_f16);
        }
        for (int64_t r = r0; r < r1; ++r) {
          const float* qr = qf.data() + (r - r0) * hd;
          float xt = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < n; ++j) {
            p[size_t(j)] = dot_f32(qr, kt.data() + j * hd, hd);
            xt = std::max(xt, p[size_t(j)]);
          }
          fold_key_tile(p.data(), n, xt, c, vt.data(), nullptr, hd,
                        s.m.view.ptr<float>()[r * heads + h], s.l.view.ptr<float>()[r * heads + h],
                        s.acc.view.ptr<float>() + (r * heads + h) * hd, o.data());
        }
      }
    }
  });
}

void CpuBackend::attn_state_finish(const AttnState& s, const Tensor& out) {
  const char* op = "attn_state_finish";
  expect_dtype(out, DType::bf16, op, "out");
  expect_rows(out, s.rows, op, "out");
  expect_cols(out, s.heads * s.head_dim, op, "out");
  expect_unit_col_stride(out, op, "out");
  const int64_t hd = s.head_dim, heads = s.heads;
  pool_.parallel_for(s.rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < heads; ++h) {
        const float l = s.l.view.ptr<float>()[r * heads + h];
        const float* acc = s.acc.view.ptr<float>() + (r * heads + h) * hd;
        uint16_t* o = out.row<uint16_t>(r) + h * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] = f32_to_bf16(acc[d] / l).bits;
      }
  });
}

}  // namespace h3s::cpu
