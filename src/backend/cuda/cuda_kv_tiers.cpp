// The approximate K/V tiers on the CUDA backend: kvi8r on Hopper (its row
// ops bit-exact with the definition of record, its attention the
// warp-specialised kernel over int8 codes, attn_fwd_i8r_sm90.cu). Tiers
// without kernels here report so through has_kv_tier, and the executor
// keeps the exact store (kv/kv_i8r.cpp logs the one line).
#include <string_view>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_checks.hpp"
#include "backend/op_checks.hpp"
#include "core/error.hpp"

namespace h3s::cuda {

namespace {

constexpr int64_t kHd = 128;  // kvi8r::kDim

void expect_heads_bf16(const Tensor& t, const char* op, const char* operand) {
  checks::expect_dtype(t, DType::bf16, Device::cuda, op, operand);
  checks::expect_unit_col_stride(t, op, operand);
  if (t.cols() % kHd != 0)
    fail(ErrorKind::invalid_argument, "{}: {} has {} columns, not whole {}-dim heads", op, operand,
         t.cols(), kHd);
  // The row kernels move 4 bf16 (8 bytes) per lane.
  if (!aligned_to(t.data, 8) || (t.rows() > 1 && t.stride[0] % 4 != 0))
    fail(ErrorKind::invalid_argument,
         "{}: {} must be 8-byte aligned with a row stride that is a multiple of 4 (got {})", op,
         operand, t.stride[0]);
}

}  // namespace

bool CudaBackend::has_kv_tier(std::string_view tier) const {
  return tier == "bf16" || (tier == "kvi8r" && attention_kvi8r_supported());
}

void CudaBackend::kvi8r_quantize(const Tensor& src, const Tensor& code, const Tensor& scale) {
  const char* op = "kvi8r_quantize";
  const int64_t heads = checks::kvi8r_quantize_args(src, code, scale, Device::cuda);
  expect_heads_bf16(src, op, "src");
  if (!aligned_to(code.data, 4) || (code.rows() > 1 && code.stride[0] % 4 != 0))
    fail(ErrorKind::invalid_argument,
         "{}: codes must be 4-byte aligned with a row stride that is a multiple of 4 (got {})", op,
         code.stride[0]);
  cuda::kvi8r_quantize(src.ptr<uint16_t>(), src.stride[0], code.ptr<int8_t>(), code.stride[0],
                       scale.ptr<uint16_t>(), scale.stride[0], src.rows(), heads, stream_);
}

void CudaBackend::rotate_heads(const Tensor& t) {
  expect_heads_bf16(t, "rotate_heads", "t");
  cuda::kvi8r_rotate_heads(t.ptr<uint16_t>(), t.stride[0], t.rows(), t.cols() / kHd, stream_);
}

void CudaBackend::attention_kvi8r(const Tensor& q, const KvI8View& kv, RowRange keys,
                                  AttnState& s) {
  const char* op = "attention_kvi8r";
  expect_attn_state(s, op);
  checks::kvi8r_attention_args(q, s.rows, s.heads, kv.k_code, kv.k_scale, kv.v_code, kv.v_scale,
                               keys, kAttnKvTile, Device::cuda);
  if (s.rows == 0) return;
  const attn::KvI8rFwdParams p{q.ptr<uint16_t>(),
                               q.stride[0],
                               s.rows,
                               s.heads,
                               kv.k_code.ptr<int8_t>(),
                               kv.v_code.ptr<int8_t>(),
                               kv.k_code.row_stride(),
                               kv.k_scale.ptr<uint16_t>(),
                               kv.v_scale.ptr<uint16_t>(),
                               kv.k_scale.row_stride(),
                               keys.begin,
                               keys.end,
                               s.m.view.ptr<float>(),
                               s.l.view.ptr<float>(),
                               s.acc.view.ptr<float>()};
  cuda::attention_kvi8r(p, /*fresh=*/false, stream_);
}

void CudaBackend::attn_state_finish_rotated(const AttnState& s, const Tensor& out) {
  const char* op = "attn_state_finish_rotated";
  expect_attn_state(s, op);
  checks::expect_rows(out, s.rows, op, "out");
  checks::expect_cols(out, s.heads * s.head_dim, op, "out");
  expect_heads_bf16(out, op, "out");
  cuda::kvi8r_finish_rotated(s.l.view.ptr<float>(), s.acc.view.ptr<float>(), out.ptr<uint16_t>(),
                             out.stride[0], s.rows, s.heads, stream_);
}

}  // namespace h3s::cuda
