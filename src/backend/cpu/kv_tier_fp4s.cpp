// The kvfp4s tier on the CPU backend: its definition of record
// (kvfmt/kvfp4s.hpp) per (stat block, head) and per (query row, head) on the
// thread pool. Attention follows the exact path's schedule (keys in
// kAttnKvTile tiles from key 0), so blocked keys and chunked queries repeat
// the single pass bit for bit.
#include <algorithm>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/kv_block_rows.hpp"
#include "core/dtype.hpp"
#include "kvfmt/kvfp4s.hpp"

namespace h3s::cpu {

namespace {

constexpr int64_t kHd = kvfp4s::kDim;
constexpr int64_t kCodeBytes = kHd / 2;  // two e2m1 codes a byte
constexpr int64_t kScales = kvfp4s::kGroups;
constexpr int64_t kBlock = kvfp4s::kBlock;
static_assert(kAttnKvTile == 128 && kBlock % kAttnKvTile == 0,
              "kvfp4s::attend_row walks the exact path's 128-key tiles inside stat blocks");

void expect_store(const KvFp4sView& kv, int64_t heads, const char* op) {
  const int64_t seq = kv.rows(), blocks = (seq + kBlock - 1) / kBlock;
  for (const Tensor* t : {&kv.k_code, &kv.v_code}) {
    expect_dtype(*t, DType::u8, op, "codes");
    expect_rows(*t, seq, op, "codes");
    expect_cols(*t, heads * kCodeBytes, op, "codes");
    expect_unit_col_stride(*t, op, "codes");
  }
  for (const Tensor* t : {&kv.k_scale, &kv.v_scale}) {
    expect_dtype(*t, DType::f8e4m3, op, "scales");
    expect_rows(*t, seq, op, "scales");
    expect_cols(*t, heads * kScales, op, "scales");
    expect_unit_col_stride(*t, op, "scales");
  }
  for (const Tensor* t : {&kv.k_global, &kv.v_global}) {
    expect_dtype(*t, DType::f32, op, "globals");
    expect_rows(*t, blocks, op, "globals");
    expect_cols(*t, heads, op, "globals");
  }
  expect_dtype(kv.k_mean, DType::bf16, op, "K means");
  expect_rows(kv.k_mean, blocks, op, "K means");
  expect_cols(kv.k_mean, heads * kHd, op, "K means");
  expect_unit_col_stride(kv.k_mean, op, "K means");
  if (kv.k_code.row_stride() != kv.v_code.row_stride() ||
      kv.k_scale.row_stride() != kv.v_scale.row_stride() ||
      kv.k_global.row_stride() != kv.v_global.row_stride())
    fail(ErrorKind::invalid_argument,
         "{}: K and V codes, scales and globals must share their row strides", op);
}

}  // namespace

void CpuBackend::kvfp4s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                                 int64_t first_row, const KvFp4sView& out) {
  const char* op = "kvfp4s_quantize";
  if (out.k_code.cols() % kCodeBytes != 0)
    fail(ErrorKind::invalid_argument, "{}: {} code bytes a row are not whole {}-dim heads", op,
         out.k_code.cols(), kHd);
  const int64_t heads = out.k_code.cols() / kCodeBytes, seq = out.rows();
  expect_store(out, heads, op);
  const KvBlockRows in(k_parts, v_parts, heads * kHd, first_row, seq, kBlock, op);
  in.for_each_block_head(
      pool_, heads, kHd,
      [&](int64_t b, int64_t h, int64_t rows, const uint16_t* k, const uint16_t* v) {
        const int64_t row = first_row + b * kBlock, block = row / kBlock;
        kvfp4s::quantise_k_block(
            k, kHd, rows, out.k_code.row<uint8_t>(row) + h * kCodeBytes, out.k_code.row_stride(),
            out.k_scale.row<uint8_t>(row) + h * kScales, out.k_scale.row_stride(),
            out.k_global.row<float>(block) + h, out.k_mean.row<uint16_t>(block) + h * kHd);
        kvfp4s::quantise_v_block(v, kHd, rows, out.v_code.row<uint8_t>(row) + h * kCodeBytes,
                                 out.v_code.row_stride(),
                                 out.v_scale.row<uint8_t>(row) + h * kScales,
                                 out.v_scale.row_stride(), out.v_global.row<float>(block) + h);
      });
}

void CpuBackend::attention_kvfp4s(const Tensor& q, const KvFp4sView& kv, RowRange keys,
                                  AttnState& s) {
  const char* op = "attention_kvfp4s";
  const int64_t heads = s.heads, rows = q.rows();
  if (s.head_dim != kHd)
    fail(ErrorKind::invalid_argument, "{}: head_dim {} (kvfp4s rotates {}-dim heads)", op,
         s.head_dim, kHd);
  expect_dtype(q, DType::bf16, op, "q");
  expect_rows(q, s.rows, op, "q");
  expect_cols(q, heads * kHd, op, "q");
  expect_unit_col_stride(q, op, "q");
  expect_store(kv, heads, op);
  checks::expect_attention_keys(keys, kv.rows(), kAttnKvTile, op);
  for_each_head_rows<kvfp4s::Scratch>(
      pool_, heads, rows, [&](int64_t h, int64_t r0, int64_t n, kvfp4s::Scratch& scratch) {
        const kvfp4s::HeadRows head{.k_code = kv.k_code.row<uint8_t>(0) + h * kCodeBytes,
                                    .k_scale = kv.k_scale.row<uint8_t>(0) + h * kScales,
                                    .v_code = kv.v_code.row<uint8_t>(0) + h * kCodeBytes,
                                    .v_scale = kv.v_scale.row<uint8_t>(0) + h * kScales,
                                    .k_global = kv.k_global.row<float>(0) + h,
                                    .v_global = kv.v_global.row<float>(0) + h,
                                    .k_mean = kv.k_mean.row<uint16_t>(0) + h * kHd,
                                    .code_stride = kv.k_code.row_stride(),
                                    .scale_stride = kv.k_scale.row_stride(),
                                    .global_stride = kv.k_global.row_stride(),
                                    .mean_stride = kv.k_mean.row_stride()};
        const int64_t at = r0 * heads + h;
        kvfp4s::attend_rows(q.row<uint16_t>(r0) + h * kHd, q.row_stride(), n, head, keys.begin,
                            keys.end, s.m.view.ptr<float>() + at, s.l.view.ptr<float>() + at, heads,
                            s.acc.view.ptr<float>() + at * kHd, heads * kHd, scratch);
      });
}

void CpuBackend::kvfp4s_decode(const KvFp4sView& kv, RowRange keys, const Tensor& k,
                               const Tensor& v) {
  const char* op = "kvfp4s_decode";
  const int64_t heads = kv.k_code.cols() / kCodeBytes;
  expect_store(kv, heads, op);
  checks::decoded_kv_args(keys, kv.rows(), heads, k, v, DType::bf16, Device::host, op);
  pool_.parallel_for(keys.size(), 16, [&](int64_t r0, int64_t r1) {
    float row[kHd];
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t key = keys.begin + r, block = key / kBlock;
      for (int64_t h = 0; h < heads; ++h)
        for (const bool keys_not_values : {true, false}) {
          kvfp4s::decode_kv_row(
              (keys_not_values ? kv.k_code : kv.v_code).row<uint8_t>(key) + h * kCodeBytes,
              (keys_not_values ? kv.k_scale : kv.v_scale).row<uint8_t>(key) + h * kScales,
              (keys_not_values ? kv.k_global : kv.v_global).row<float>(block)[h],
              keys_not_values ? kv.k_mean.row<uint16_t>(block) + h * kHd : nullptr, row);
          const Tensor& out = keys_not_values ? k : v;
          uint16_t* dst = out.ptr<uint16_t>() + r * out.stride[0] + h * out.stride[1];
          for (int64_t d = 0; d < kHd; ++d) dst[d] = f32_to_bf16(row[d]).bits;
        }
    }
  });
}

}  // namespace h3s::cpu
