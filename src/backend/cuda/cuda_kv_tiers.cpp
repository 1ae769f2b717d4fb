// The approximate K/V tiers on the CUDA backend: kvi8r (its row ops
// bit-exact with the definition of record; its attention on Hopper the
// warp-specialised kernel over int8 codes, attn_fwd_i8r_sm90.cu, elsewhere
// its decode path: fp16 blocks for the exact kernel's fp16 instance), kvi8s
// (its quantiser bit-exact, its attention on int8/fp8 wgmma on Hopper,
// attn_fwd_i8s_sm90.cu, on mma.sync on 8.9+, attn_fwd_i8s_sm89.cu) and
// kvfp4s (its quantiser bit-exact; its attention the decode path on every
// GPU, bf16 blocks for the exact kernel, and on Hopper the same bits as
// attn_fwd_fp4s_sm90.cu, which ExecOptions::attn_kernel sm90 selects).
// kernel_choice.hpp decides which per call. Tiers without kernels here
// report so through has_kv_tier, and the executor keeps the exact store
// (kv/kv_store.cpp logs the one line).
#include <algorithm>
#include <string_view>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_checks.hpp"
#include "backend/kv_tier_decode.hpp"
#include "backend/op_checks.hpp"
#include "core/error.hpp"
#include "kvfmt/kvfp4s.hpp"
#include "kvfmt/kvi8s.hpp"

namespace h3s::cuda {

namespace {

constexpr int64_t kHd = 128;  // kvi8r::kDim

// The decode kernels store 16-byte groups: contiguous [keys, heads, 128]
// rows, 16-byte aligned (the shapes are checks::decoded_kv_args').
void expect_decode_outputs(const Tensor& k, const Tensor& v, const char* op) {
  for (const Tensor* t : {&k, &v})
    if (t->stride[1] != kHd || t->stride[0] % 8 != 0 || !aligned_to(t->data, 16))
      fail(ErrorKind::invalid_argument,
           "{}: outputs must be 16-byte aligned [keys, heads, {}] views with contiguous heads", op,
           kHd);
}

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

Kernel CudaBackend::tier_kernel(KvTier tier) const {
  switch (tier) {
    case KvTier::kvi8r:
      return attention_choice(Op::kvi8r, attn_);
    case KvTier::kvi8s:
      return attention_choice(Op::kvi8s, attn_);
    case KvTier::kvfp4s:
      return attention_choice(Op::kvfp4s, attn_);
    default:
      return attention_choice(Op::attention, attn_);
  }
}

bool CudaBackend::has_kv_tier(KvTier tier) const {
  if (tier == KvTier::kvmix)  // its two stores' kernels
    return tier_kernel(KvTier::kvi8s) != Kernel::none &&
           tier_kernel(KvTier::kvfp4s) != Kernel::none;
  return tier_kernel(tier) != Kernel::none;
}

int64_t CudaBackend::kv_tier_decode_keys(KvTier tier) const {
  // Each decode block costs the exact kernel a round trip of the query
  // chunk's fp32 state, against 2 x keys x 7168 x 2 bytes of scratch at H3's
  // 56 heads. (kvmix decodes its 4-bit heads only: the whole width bounds them.)
  if (tier != KvTier::kvi8r && tier != KvTier::kvfp4s && tier != KvTier::kvmix) return 0;
  const KvTier decoded = tier == KvTier::kvmix ? KvTier::kvfp4s : tier;
  return decode_keys(tier_kernel(decoded), kernel_arch(), attn_);
}

std::string CudaBackend::kv_tier_kernel(KvTier tier) const {
  if (!has_kv_tier(tier) || tier == KvTier::bf16) return std::string(attention_kernel());
  if (tier == KvTier::kvmix)  // each head on its store's kernel
    return std::string("kvi8s ") + std::string(kernel_name(tier_kernel(KvTier::kvi8s))) +
           ", kvfp4s " + std::string(kernel_name(tier_kernel(KvTier::kvfp4s)));
  return std::string(kernel_name(tier_kernel(tier)));
}

void CudaBackend::kvi8r_quantize(const Tensor& src, const Tensor& code, const Tensor& scale) {
  const char* op = "kvi8r_quantize";
  const int64_t heads = checks::kvi8r_quantize_args(src, code, scale, Device::cuda);
  expect_heads_bf16(src, op, "src");
  if (!aligned_to(code.data, 4) || (code.rows() > 1 && code.stride[0] % 4 != 0))
    fail(ErrorKind::invalid_argument,
         "{}: codes must be 4-byte aligned with a row stride that is a multiple of 4 (got {})", op,
         code.stride[0]);
  cuda::kvi8r_quantize(src.ptr<uint16_t>(), src.stride[0], code.ptr<uint8_t>(), code.stride[0],
                       scale.ptr<uint16_t>(), scale.stride[0], scale.stride[1], src.rows(), heads,
                       stream_);
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
  if (tier_kernel(KvTier::kvi8r) == Kernel::kvi8r_decode) {
    attention_kvi8r_decoded(*this, scratch_, q, kv, keys, s, kv_tier_decode_keys(KvTier::kvi8r));
    return;
  }
  const attn::KvI8rFwdParams p{q.ptr<uint16_t>(),
                               q.stride[0],
                               s.rows,
                               s.heads,
                               kv.k_code.ptr<uint8_t>(),
                               kv.v_code.ptr<uint8_t>(),
                               kv.k_code.row_stride(),
                               kv.k_scale.ptr<uint16_t>(),
                               kv.v_scale.ptr<uint16_t>(),
                               kv.k_scale.stride[0],
                               kv.k_scale.stride[1],
                               keys.begin,
                               keys.end,
                               s.m.view.ptr<float>(),
                               s.l.view.ptr<float>(),
                               s.acc.view.ptr<float>()};
  cuda::attention_kvi8r(p, /*fresh=*/false, stream_);
}

void CudaBackend::kvi8r_decode(const KvI8View& kv, RowRange keys, const Tensor& k,
                               const Tensor& v) {
  const char* op = "kvi8r_decode";
  const int64_t heads = kv.k_code.cols() / kHd;
  checks::kvi8r_store_args(kv.k_code, kv.k_scale, kv.v_code, kv.v_scale, heads, Device::cuda, op);
  checks::decoded_kv_args(keys, kv.rows(), heads, k, v, DType::f16, Device::cuda, op);
  expect_decode_outputs(k, v, op);
  if (!aligned_to(kv.k_code.data, 16) || !aligned_to(kv.v_code.data, 16) ||
      kv.k_code.row_stride() % 16 != 0)
    fail(ErrorKind::invalid_argument,
         "{}: the decode reads 16-byte code groups (code row stride {} bytes)", op,
         kv.k_code.row_stride());
  cuda::kvi8r_decode(kv.k_code.ptr<uint8_t>(), kv.v_code.ptr<uint8_t>(), kv.k_code.row_stride(),
                     kv.k_scale.ptr<uint16_t>(), kv.v_scale.ptr<uint16_t>(), kv.k_scale.stride[0],
                     kv.k_scale.stride[1], keys.begin, keys.size(), heads, k.ptr<uint16_t>(),
                     k.stride[0], v.ptr<uint16_t>(), v.stride[0], stream_);
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

namespace {

// A quantiser's K/V rows: one or two row-wise parts each (a kept tail, then
// the chunk), whole `group`-token groups from first_row unless they end the
// sequence of `seq`.
KvRowParts row_parts(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                     int64_t heads, int64_t first_row, int64_t seq, int64_t group, const char* op) {
  if (k_parts.size() != v_parts.size() || k_parts.empty() || k_parts.size() > 2)
    fail(ErrorKind::invalid_argument,
         "{}: K and V come as one or two row-wise parts each (a kept tail, then the chunk); got "
         "{} and {}",
         op, k_parts.size(), v_parts.size());
  KvRowParts in{};
  int64_t n = 0;
  for (size_t i = 0; i < k_parts.size(); ++i) {
    const Tensor &k = k_parts[i], &v = v_parts[i];
    expect_heads_bf16(k, op, "K rows");
    expect_heads_bf16(v, op, "V rows");
    checks::expect_cols(k, heads * kHd, op, "K rows");
    checks::expect_rows(v, k.rows(), op, "V rows");
    in.k[i] = k.ptr<uint16_t>();
    in.v[i] = v.ptr<uint16_t>();
    in.ldk[i] = k.stride[0];
    in.ldv[i] = v.stride[0];
    in.rows[i] = k.rows();
    n += k.rows();
  }
  if (first_row < 0 || first_row % group != 0 || first_row + n > seq ||
      (n % group != 0 && first_row + n != seq))
    fail(ErrorKind::invalid_argument,
         "{}: rows [{}, {}) of {} are not whole {}-token groups (only the sequence's last may be "
         "short)",
         op, first_row, first_row + n, seq, group);
  return in;
}

}  // namespace

void CudaBackend::kvi8s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                                 int64_t first_row, const KvI8sView& out) {
  const char* op = "kvi8s_quantize";
  if (out.k_code.cols() % kHd != 0)
    fail(ErrorKind::invalid_argument, "{}: {} columns are not whole {}-dim heads", op,
         out.k_code.cols(), kHd);
  const int64_t heads = out.k_code.cols() / kHd;
  const int64_t seq = checks::kvi8s_store_args(out, heads, Device::cuda, op);
  const KvRowParts in = row_parts(k_parts, v_parts, heads, first_row, seq, kvi8s::kTile, op);
  cuda::kvi8s_quantize(in, first_row, heads, out.k_code.ptr<int8_t>(), out.k_code.row_stride(),
                       out.v_code.ptr<uint8_t>(), out.v_code.row_stride(),
                       out.header.ptr<uint8_t>(), stream_);
}

void CudaBackend::attention_kvi8s(const Tensor& q, const KvI8sView& kv, RowRange keys,
                                  AttnState& s) {
  const char* op = "attention_kvi8s";
  expect_attn_state(s, op);
  checks::expect_dtype(q, DType::bf16, Device::cuda, op, "q");
  checks::expect_rows(q, s.rows, op, "q");
  checks::expect_cols(q, s.heads * kHd, op, "q");
  checks::expect_unit_col_stride(q, op, "q");
  const int64_t seq = checks::kvi8s_store_args(kv, s.heads, Device::cuda, op);
  checks::expect_attention_keys(keys, seq, kAttnKvTile, op);
  if (s.rows == 0) return;
  const attn::KvI8sFwdParams p{q.ptr<uint16_t>(),
                               q.stride[0],
                               s.rows,
                               s.heads,
                               kv.k_code.ptr<int8_t>(),
                               kv.k_code.row_stride(),
                               kv.v_code.ptr<uint8_t>(),
                               kv.v_code.row_stride(),
                               kv.header.ptr<uint8_t>(),
                               kvi8s::tiles(seq) * s.heads,
                               keys.begin,
                               keys.end,
                               s.m.view.ptr<float>(),
                               s.l.view.ptr<float>(),
                               s.acc.view.ptr<float>()};
  cuda::attention_kvi8s(p, tier_kernel(KvTier::kvi8s), stream_);
}

namespace {

// The kvfp4s store's tensors on this device, with their shapes and strides
// (the CPU backend's checks, the same ones).
Kvfp4sStore fp4s_store(const KvFp4sView& kv, int64_t heads, const char* op) {
  constexpr int64_t kCodeBytes = kvfp4s::kDim / 2, kScales = kvfp4s::kGroups;
  const int64_t seq = kv.rows(), blocks = (seq + kvfp4s::kBlock - 1) / kvfp4s::kBlock;
  for (const Tensor* t : {&kv.k_code, &kv.v_code}) {
    checks::expect_dtype(*t, DType::u8, Device::cuda, op, "codes");
    checks::expect_rows(*t, seq, op, "codes");
    checks::expect_cols(*t, heads * kCodeBytes, op, "codes");
    checks::expect_unit_col_stride(*t, op, "codes");
  }
  for (const Tensor* t : {&kv.k_scale, &kv.v_scale}) {
    checks::expect_dtype(*t, DType::f8e4m3, Device::cuda, op, "scales");
    checks::expect_rows(*t, seq, op, "scales");
    checks::expect_cols(*t, heads * kScales, op, "scales");
    checks::expect_unit_col_stride(*t, op, "scales");
  }
  for (const Tensor* t : {&kv.k_global, &kv.v_global}) {
    checks::expect_dtype(*t, DType::f32, Device::cuda, op, "globals");
    checks::expect_rows(*t, blocks, op, "globals");
    checks::expect_cols(*t, heads, op, "globals");
    checks::expect_unit_col_stride(*t, op, "globals");
  }
  checks::expect_dtype(kv.k_mean, DType::bf16, Device::cuda, op, "K means");
  checks::expect_rows(kv.k_mean, blocks, op, "K means");
  checks::expect_cols(kv.k_mean, heads * kvfp4s::kDim, op, "K means");
  checks::expect_unit_col_stride(kv.k_mean, op, "K means");
  if (kv.k_code.row_stride() != kv.v_code.row_stride() ||
      kv.k_scale.row_stride() != kv.v_scale.row_stride() ||
      kv.k_global.row_stride() != kv.v_global.row_stride())
    fail(ErrorKind::invalid_argument,
         "{}: K and V codes, scales and globals must share their row strides", op);
  return {kv.k_code.ptr<uint8_t>(),  kv.v_code.ptr<uint8_t>(), kv.k_scale.ptr<uint8_t>(),
          kv.v_scale.ptr<uint8_t>(), kv.k_code.row_stride(),   kv.k_scale.row_stride(),
          kv.k_global.ptr<float>(),  kv.v_global.ptr<float>(), kv.k_global.row_stride(),
          kv.k_mean.ptr<uint16_t>(), kv.k_mean.row_stride()};
}

}  // namespace

void CudaBackend::kvfp4s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                                  int64_t first_row, const KvFp4sView& out) {
  const char* op = "kvfp4s_quantize";
  if (out.k_code.cols() % (kvfp4s::kDim / 2) != 0)
    fail(ErrorKind::invalid_argument, "{}: {} code bytes a row are not whole {}-dim heads", op,
         out.k_code.cols(), kvfp4s::kDim);
  const int64_t heads = out.k_code.cols() / (kvfp4s::kDim / 2);
  const Kvfp4sStore store = fp4s_store(out, heads, op);
  const KvRowParts in =
      row_parts(k_parts, v_parts, heads, first_row, out.rows(), kvfp4s::kBlock, op);
  cuda::kvfp4s_quantize(in, first_row, heads, store, stream_);
}

void CudaBackend::attention_kvfp4s(const Tensor& q, const KvFp4sView& kv, RowRange keys,
                                   AttnState& s) {
  const char* op = "attention_kvfp4s";
  expect_attn_state(s, op);
  checks::expect_dtype(q, DType::bf16, Device::cuda, op, "q");
  checks::expect_rows(q, s.rows, op, "q");
  checks::expect_cols(q, s.heads * kHd, op, "q");
  checks::expect_unit_col_stride(q, op, "q");
  const Kvfp4sStore st = fp4s_store(kv, s.heads, op);
  checks::expect_attention_keys(keys, kv.rows(), kAttnKvTile, op);
  if (s.rows == 0) return;
  if (tier_kernel(KvTier::kvfp4s) == Kernel::kvfp4s_decode) {
    attention_kvfp4s_decoded(*this, scratch_, q, kv, keys, s, kv_tier_decode_keys(KvTier::kvfp4s));
    return;
  }
  const attn::KvFp4sFwdParams p{q.ptr<uint16_t>(),
                                q.stride[0],
                                s.rows,
                                s.heads,
                                st.k_code,
                                st.v_code,
                                st.code_stride,
                                st.k_scale,
                                st.v_scale,
                                st.scale_stride,
                                st.k_global,
                                st.v_global,
                                st.global_stride,
                                st.k_mean,
                                st.mean_stride,
                                keys.begin,
                                keys.end,
                                s.m.view.ptr<float>(),
                                s.l.view.ptr<float>(),
                                s.acc.view.ptr<float>()};
  cuda::attention_kvfp4s(p, stream_);
}

void CudaBackend::kvfp4s_decode(const KvFp4sView& kv, RowRange keys, const Tensor& k,
                                const Tensor& v) {
  const char* op = "kvfp4s_decode";
  const int64_t heads = kv.k_code.cols() / (kvfp4s::kDim / 2);
  const Kvfp4sStore st = fp4s_store(kv, heads, op);
  checks::decoded_kv_args(keys, kv.rows(), heads, k, v, DType::bf16, Device::cuda, op);
  expect_decode_outputs(k, v, op);
  if (!aligned_to(st.k_code, 8) || !aligned_to(st.v_code, 8) || st.code_stride % 8 != 0 ||
      !aligned_to(st.k_mean, 4) || st.mean_stride % 2 != 0)
    fail(ErrorKind::invalid_argument,
         "{}: the decode reads 8-byte code groups and 4-byte mean pairs (code stride {}, mean "
         "stride {})",
         op, st.code_stride, st.mean_stride);
  cuda::kvfp4s_decode(st, keys.begin, keys.size(), heads, k.ptr<uint16_t>(), k.stride[0],
                      v.ptr<uint16_t>(), v.stride[0], stream_);
}

}  // namespace h3s::cuda
