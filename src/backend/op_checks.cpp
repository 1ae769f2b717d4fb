// Shared argument checks (see op_checks.hpp).
#include "backend/op_checks.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "kvfmt/kvi8s.hpp"

namespace h3s::checks {

namespace {
const char* device_name(Device d) {
  return d == Device::host ? "host" : "device";
}
}  // namespace

void expect_device(const Tensor& t, Device d, const char* op, const char* operand) {
  if (t.device != d)
    fail(ErrorKind::invalid_argument, "{}: {} must be {} memory for the {} backend", op, operand,
         device_name(d), d == Device::host ? "cpu" : "cuda");
}

void expect_dtype(const Tensor& t, DType dt, Device d, const char* op, const char* operand) {
  if (t.dtype != dt)
    fail(ErrorKind::invalid_argument, "{}: {} must be {}, got {}", op, operand, dtype_name(dt),
         dtype_name(t.dtype));
  expect_device(t, d, op, operand);
}

void expect_float(const Tensor& t, Device d, const char* op, const char* operand) {
  if (t.dtype != DType::bf16 && t.dtype != DType::f32)
    fail(ErrorKind::invalid_argument, "{}: {} must be bf16 or f32, got {}", op, operand,
         dtype_name(t.dtype));
  expect_device(t, d, op, operand);
}

void expect_rows(const Tensor& t, int64_t rows, const char* op, const char* operand) {
  if (t.rows() != rows)
    fail(ErrorKind::invalid_argument, "{}: {} has {} rows, expected {}", op, operand, t.rows(),
         rows);
}

void expect_cols(const Tensor& t, int64_t cols, const char* op, const char* operand) {
  if (t.cols() != cols)
    fail(ErrorKind::invalid_argument, "{}: {} has {} columns, expected {}", op, operand, t.cols(),
         cols);
}

void expect_unit_col_stride(const Tensor& t, const char* op, const char* operand) {
  if (t.rank > 2)
    fail(ErrorKind::invalid_argument, "{}: {} must be a 2-D [rows, cols] view, got rank {}", op,
         operand, t.rank);
  if (t.rank == 2 && t.cols() > 1 && t.stride[1] != 1)
    fail(ErrorKind::invalid_argument, "{}: {} must have unit column stride", op, operand);
}

void expect_attention_keys(RowRange keys, int64_t kv_rows, int64_t tile, const char* op) {
  if (keys.begin < 0 || keys.end > kv_rows || keys.begin > keys.end)
    fail(ErrorKind::invalid_argument, "{}: keys [{}, {}) outside the {} K/V rows", op, keys.begin,
         keys.end, kv_rows);
  if (keys.begin % tile != 0)
    fail(ErrorKind::invalid_argument,
         "{}: a K/V block must start on a {}-row tile boundary (got {}); align kv_block", op, tile,
         keys.begin);
}

void expect_runs(std::span<const ModRun> runs, int64_t rows, int64_t mod_rows, const char* op) {
  for (const ModRun& r : runs)
    if (r.begin < 0 || r.end > rows || r.begin > r.end || r.mod_row < 0 || r.mod_row >= mod_rows)
      fail(ErrorKind::invalid_argument, "{}: run [{}, {}) row {} out of range", op, r.begin, r.end,
           r.mod_row);
}

void expect_prepared(const QuantLinear& w, Device d, const char* op) {
  w.check_complete(op);
  const char* where = d == Device::host ? "host" : "device";
  auto on = [&](Device have, const char* what) {
    if (have != d)
      fail(ErrorKind::invalid_argument,
           "{}: the {} weight [{}, {}] has its {} in {} memory, not in this backend's {} memory: "
           "prepare it for this backend first (Backend::prepare)",
           op, format_name(w.format), w.out, w.in, what, have == Device::host ? "host" : "device",
           where);
  };
  auto need = [&](bool present, const char* what) {
    if (!present)
      fail(ErrorKind::invalid_argument,
           "{}: the {} weight [{}, {}] lacks its {}: prepare it for this backend first "
           "(Backend::prepare)",
           op, format_name(w.format), w.out, w.in, what);
  };
  switch (w.format) {
    case WeightFormat::bf16:
      on(w.w_bf16.device(), "bf16 values");
      break;
    case WeightFormat::nvfp4:
      need(!w.w_bf16.empty(), "bf16 decode");
      on(w.w_bf16.device(), "bf16 decode");
      break;
    case WeightFormat::f32:
      on(w.w_f32.device(), "fp32 values");
      break;
    case WeightFormat::int8:
      on(w.w_i8.device(), "int8 values");
      on(w.w_scale.device(), "row scales");
      break;
    case WeightFormat::w4a8:
      if (d == Device::host) {
        need(!w.w_i8.empty(), "int8 decode");
        on(w.w_i8.device(), "int8 decode");
      } else {
        need(!w.w4_codes.empty() && !w.w4_s_rel.empty(), "packed codes");
        need(w.w4_codebook.size() == 16, "16 decode levels");
        on(w.w4_codes.device(), "packed codes");
        on(w.w4_s_rel.device(), "group scales");
        on(w.w4_codebook.device(), "decode levels");
      }
      on(w.w_scale.device(), "row scales");
      break;
  }
  if (w.has_bias()) on(w.bias.device(), "bias");
}

RowRange linear_args(const Tensor& x, const QuantLinear& w, const Tensor& y, RowRange features,
                     Device d) {
  const char* op = "linear";
  expect_prepared(w, d, op);
  if (features.size() == 0) features = {0, w.out};
  if (features.begin < 0 || features.end > w.out || features.begin > features.end)
    fail(ErrorKind::invalid_argument, "{}: features [{}, {}) outside the {} outputs", op,
         features.begin, features.end, w.out);
  const DType io = w.format == WeightFormat::f32 ? DType::f32 : DType::bf16;
  expect_dtype(x, io, d, op, "x");
  expect_dtype(y, io, d, op, "y");
  expect_unit_col_stride(x, op, "x");
  expect_unit_col_stride(y, op, "y");
  expect_cols(x, w.in, op, "x");
  expect_cols(y, features.size(), op, "y");
  expect_rows(y, x.rows(), op, "y");
  return features;
}

void rms_norm_mod_args(const Tensor& x, const Tensor& gamma, const ModTable* mod,
                       std::span<const ModRun> runs, const Tensor& out, Device d) {
  const char* op = "rms_norm_mod";
  expect_dtype(x, DType::bf16, d, op, "x");
  expect_dtype(out, DType::bf16, d, op, "out");
  expect_dtype(gamma, DType::bf16, d, op, "gamma");
  expect_unit_col_stride(x, op, "x");
  expect_unit_col_stride(out, op, "out");
  const int64_t rows = x.rows(), h = x.cols();
  expect_rows(out, rows, op, "out");
  expect_cols(out, h, op, "out");
  if (gamma.numel() != h)
    fail(ErrorKind::invalid_argument, "{}: gamma has {} values, expected {}", op, gamma.numel(), h);
  if (!mod) return;
  expect_dtype(mod->shift, DType::bf16, d, op, "shift");
  expect_dtype(mod->scale, DType::bf16, d, op, "scale");
  expect_cols(mod->shift, h, op, "shift");
  expect_cols(mod->scale, h, op, "scale");
  expect_unit_col_stride(mod->shift, op, "shift");
  expect_unit_col_stride(mod->scale, op, "scale");
  if (mod->shift.rows() != mod->scale.rows())
    fail(ErrorKind::invalid_argument, "{}: shift has {} rows but scale has {}", op,
         mod->shift.rows(), mod->scale.rows());
  expect_runs(runs, rows, mod->shift.rows(), op);
}

void qk_norm_rope_args(const Tensor& t, const Tensor& w, const Tensor& rope, int64_t rot_dim,
                       Device d) {
  const char* op = "qk_norm_rope";
  expect_dtype(t, DType::bf16, d, op, "t");
  expect_dtype(w, DType::bf16, d, op, "weight");
  expect_unit_col_stride(t, op, "t");
  constexpr int64_t kHead = 128;
  if (w.numel() != kHead)
    fail(ErrorKind::invalid_argument, "{}: weight has {} values, expected {}", op, w.numel(),
         kHead);
  // Every head reads the 128 weights as one run.
  if (!w.is_contiguous()) fail(ErrorKind::invalid_argument, "{}: weight must be contiguous", op);
  if (t.cols() % kHead != 0)
    fail(ErrorKind::invalid_argument, "{}: {} columns is not a whole number of 128-wide heads", op,
         t.cols());
  if (rot_dim < 0 || rot_dim > kHead || rot_dim % 2 != 0)
    fail(ErrorKind::invalid_argument, "{}: rot_dim {} must be even and <= 128", op, rot_dim);
  if (rot_dim == 0) return;
  expect_dtype(rope, DType::bf16, d, op, "rope");
  expect_rows(rope, t.rows(), op, "rope");
  // Each row's (cos, sin) pairs are read as one contiguous run.
  if (rope.stride[size_t(rope.rank - 1)] != 1 || (rope.rank == 3 && rope.stride[1] != 2))
    fail(ErrorKind::invalid_argument, "{}: rope rows must be contiguous (cos, sin) pairs", op);
  const int64_t width = rope.cols() * (rope.rank == 3 ? rope.shape[2] : 1);
  if (width != rot_dim)
    fail(ErrorKind::invalid_argument, "{}: rope rows hold {} values, expected rot_dim {}", op,
         width, rot_dim);
}

namespace {
constexpr int64_t kKvi8rDim = 128;  // kvi8r::kDim: the rotation's length
}  // namespace

void attention_args(const Tensor& q, const KvView& kv, RowRange keys, int64_t rows, int64_t heads,
                    int64_t head_dim, Device d, const char* op) {
  expect_dtype(q, DType::bf16, d, op, "q");
  if (kv.k.dtype != DType::bf16 && kv.k.dtype != DType::f16)
    fail(ErrorKind::invalid_argument, "{}: k must be bf16 (or f16, a decoded kvi8r block), got {}",
         op, dtype_name(kv.k.dtype));
  expect_dtype(kv.k, kv.k.dtype, d, op, "k");
  expect_dtype(kv.v, kv.k.dtype, d, op, "v");  // v as k
  expect_rows(q, rows, op, "q");
  expect_cols(q, heads * head_dim, op, "q");
  expect_unit_col_stride(q, op, "q");
  if (kv.k.rank != 3 || kv.k.shape[1] != heads || kv.k.shape[2] != head_dim ||
      kv.k.stride[2] != 1 || kv.v.rank != 3 || kv.v.shape != kv.k.shape || kv.v.stride[2] != 1)
    fail(ErrorKind::invalid_argument, "{}: k/v must be [seq, {}, {}] views with unit dim stride",
         op, heads, head_dim);
  expect_attention_keys(keys, kv.rows(), kAttnKvTile, op);
}

void decoded_kv_args(RowRange keys, int64_t kv_rows, int64_t heads, const Tensor& k,
                     const Tensor& v, DType dt, Device d, const char* op) {
  if (keys.begin < 0 || keys.end < keys.begin || keys.end > kv_rows)
    fail(ErrorKind::invalid_argument, "{}: keys [{}, {}) outside the store's {} rows", op,
         keys.begin, keys.end, kv_rows);
  for (const Tensor* t : {&k, &v}) {
    expect_dtype(*t, dt, d, op, t == &k ? "k" : "v");
    if (t->rank != 3 || t->shape[0] != keys.size() || t->shape[1] != heads ||
        t->shape[2] != kKvi8rDim || t->stride[2] != 1)
      fail(ErrorKind::invalid_argument, "{}: outputs must be [{}, {}, {}] views", op, keys.size(),
           heads, kKvi8rDim);
  }
}

int64_t kvi8r_quantize_args(const Tensor& src, const Tensor& code, const Tensor& scale, Device d) {
  const char* op = "kvi8r_quantize";
  expect_dtype(src, DType::bf16, d, op, "src");
  expect_dtype(code, DType::u8, d, op, "code");  // biased: code + 128
  expect_dtype(scale, DType::f16, d, op, "scale");
  expect_unit_col_stride(src, op, "src");
  if (src.cols() % kKvi8rDim != 0)
    fail(ErrorKind::invalid_argument, "{}: src has {} columns, not whole {}-dim heads", op,
         src.cols(), kKvi8rDim);
  const int64_t rows = src.rows(), heads = src.cols() / kKvi8rDim;
  expect_rows(code, rows, op, "code");
  expect_cols(code, heads * kKvi8rDim, op, "code");
  expect_unit_col_stride(code, op, "code");
  expect_rows(scale, rows, op, "scale");
  expect_cols(scale, heads, op, "scale");  // any strides: the store's are head-major
  return heads;
}

void kvi8r_attention_args(const Tensor& q, int64_t rows, int64_t heads, const Tensor& k_code,
                          const Tensor& k_scale, const Tensor& v_code, const Tensor& v_scale,
                          RowRange keys, int64_t tile, Device d) {
  const char* op = "attention_kvi8r";
  expect_dtype(q, DType::bf16, d, op, "q");
  expect_rows(q, rows, op, "q");
  expect_cols(q, heads * kKvi8rDim, op, "q");
  expect_unit_col_stride(q, op, "q");
  const int64_t seq = kvi8r_store_args(k_code, k_scale, v_code, v_scale, heads, d, op);
  expect_attention_keys(keys, seq, tile, op);
}

int64_t kvi8r_store_args(const Tensor& k_code, const Tensor& k_scale, const Tensor& v_code,
                         const Tensor& v_scale, int64_t heads, Device d, const char* op) {
  expect_dtype(k_code, DType::u8, d, op, "k codes");  // biased: code + 128
  expect_dtype(v_code, DType::u8, d, op, "v codes");
  expect_dtype(k_scale, DType::f16, d, op, "k scales");
  expect_dtype(v_scale, DType::f16, d, op, "v scales");
  for (const Tensor* t : {&k_code, &v_code}) expect_cols(*t, heads * kKvi8rDim, op, "codes");
  for (const Tensor* t : {&k_scale, &v_scale}) expect_cols(*t, heads, op, "scales");
  for (const Tensor* t : {&k_code, &v_code}) expect_unit_col_stride(*t, op, "K/V codes");
  if (v_code.row_stride() != k_code.row_stride() || v_scale.stride[0] != k_scale.stride[0] ||
      v_scale.stride[1] != k_scale.stride[1])
    fail(ErrorKind::invalid_argument,
         "{}: K and V codes must share a row stride, and their scales both strides", op);
  const int64_t seq = k_code.rows();
  if (v_code.rows() != seq || k_scale.rows() != seq || v_scale.rows() != seq)
    fail(ErrorKind::invalid_argument, "{}: codes and scales of K and V must have one row count",
         op);
  return seq;
}

int64_t kvi8s_store_args(const KvI8sView& kv, int64_t heads, Device d, const char* op) {
  const int64_t seq = kv.rows();
  expect_dtype(kv.k_code, DType::i8, d, op, "K codes");
  expect_dtype(kv.v_code, DType::f8e4m3, d, op, "V codes");
  expect_dtype(kv.header, DType::u8, d, op, "headers");
  expect_cols(kv.k_code, heads * kvi8s::kDim, op, "K codes");
  expect_rows(kv.v_code, heads * kvi8s::kDim, op, "V codes");
  expect_cols(kv.v_code, kvi8s::padded_seq(seq), op, "V codes");
  expect_rows(kv.header, kvi8s::tiles(seq) * heads * kvi8s::kHeaderRows, op, "headers");
  expect_cols(kv.header, kvi8s::kDim, op, "headers");
  expect_unit_col_stride(kv.k_code, op, "K codes");
  expect_unit_col_stride(kv.v_code, op, "V codes");
  expect_unit_col_stride(kv.header, op, "headers");
  if (kv.header.rows() > 1 && kv.header.row_stride() != kvi8s::kDim)
    fail(ErrorKind::invalid_argument, "{}: header records must be contiguous (row stride {})", op,
         kv.header.row_stride());
  return seq;
}

}  // namespace h3s::checks
