// The kvi8s tier on the CPU backend: its definition of record (kvfmt/kvi8s.hpp)
// block by block and row by row on the thread pool. Attention follows the
// exact path's schedule (keys in kAttnKvTile tiles from key 0, one (query
// row, head) at a time), so blocked keys and chunked queries repeat the
// single pass bit for bit.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/kv_block_rows.hpp"
#include "kvfmt/kvi8s.hpp"

namespace h3s::cpu {

namespace {

constexpr int64_t kHd = kvi8s::kDim;
constexpr int64_t kTile = kvi8s::kTile;
static_assert(kAttnKvTile == kTile,
              "kvi8s::attend_row walks the exact path's 128-key tiles, one header each");

void expect_store(const KvI8sView& kv, int64_t heads, const char* op) {
  checks::kvi8s_store_args(kv, heads, Device::host, op);
}

// Tile T of head h's header record.
uint8_t* header_of(const KvI8sView& kv, int64_t heads, int64_t tile, int64_t h) {
  return kv.header.row<uint8_t>((tile * heads + h) * kvi8s::kHeaderRows);
}

}  // namespace

void CpuBackend::kvi8s_quantize(std::span<const Tensor> k_parts, std::span<const Tensor> v_parts,
                                int64_t first_row, const KvI8sView& out) {
  const char* op = "kvi8s_quantize";
  if (out.k_code.cols() % kHd != 0)
    fail(ErrorKind::invalid_argument, "{}: {} columns are not whole {}-dim heads", op,
         out.k_code.cols(), kHd);
  const int64_t heads = out.k_code.cols() / kHd, seq = out.rows();
  expect_store(out, heads, op);
  const KvBlockRows in(k_parts, v_parts, heads * kHd, first_row, seq, kTile, op);
  in.for_each_block_head(
      pool_, heads, kHd,
      [&](int64_t b, int64_t h, int64_t rows, const uint16_t* k, const uint16_t* v) {
        const int64_t row = first_row + b * kTile;
        kvi8s::quantise_tile(k, v, kHd, rows, out.k_code.row<int8_t>(row) + h * kHd,
                             out.k_code.row_stride(), out.v_code.row<uint8_t>(h * kHd) + row,
                             out.v_code.row_stride(), header_of(out, heads, row / kTile, h));
      });
}

void CpuBackend::attention_kvi8s(const Tensor& q, const KvI8sView& kv, RowRange keys,
                                 AttnState& s) {
  const char* op = "attention_kvi8s";
  const int64_t heads = s.heads, rows = q.rows();
  if (s.head_dim != kHd)
    fail(ErrorKind::invalid_argument, "{}: head_dim {} (kvi8s rotates {}-dim heads)", op,
         s.head_dim, kHd);
  expect_dtype(q, DType::bf16, op, "q");
  expect_rows(q, s.rows, op, "q");
  expect_cols(q, heads * kHd, op, "q");
  expect_unit_col_stride(q, op, "q");
  expect_store(kv, heads, op);
  checks::expect_attention_keys(keys, kv.rows(), kAttnKvTile, op);
  pool_.parallel_for(heads * rows, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t task = t0; task < t1; ++task) {
      const int64_t h = task / rows, r = task % rows;
      const kvi8s::HeadRows head{kv.k_code.row<int8_t>(0) + h * kHd, kv.k_code.row_stride(),
                                 kv.v_code.row<uint8_t>(h * kHd),    kv.v_code.row_stride(),
                                 header_of(kv, heads, 0, h),         heads * kvi8s::kHeaderBytes};
      kvi8s::attend_row(q.row<uint16_t>(r) + h * kHd, head, keys.begin, keys.end,
                        s.m.view.ptr<float>()[r * heads + h], s.l.view.ptr<float>()[r * heads + h],
                        s.acc.view.ptr<float>() + (r * heads + h) * kHd);
    }
  });
}

}  // namespace h3s::cpu
