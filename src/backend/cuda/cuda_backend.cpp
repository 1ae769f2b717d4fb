// CudaBackend: argument checks (the CPU backend's, plus "lives on the GPU"),
// then one launcher per op from kernels.hpp, all on the backend's stream.
#include "backend/cuda/cuda_backend.hpp"

#include <cuda_runtime.h>

#include <array>
#include <string_view>

#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/cuda_checks.hpp"
#include "backend/cuda/elementwise/mod_rows.hpp"
#include "backend/op_checks.hpp"
#include "core/error.hpp"

namespace h3s::cuda {

// Defined in cuda_memory.cpp (declared for kernels in common.cuh).
[[noreturn]] void fail_cuda(const char* what, cudaError_t err);

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail_cuda(what, e);
}

// ---- argument checks: one line naming the op, the operand, expected vs found --

void expect_device(const Tensor& t, const char* op, const char* operand) {
  checks::expect_device(t, Device::cuda, op, operand);
}
void expect_dtype(const Tensor& t, DType d, const char* op, const char* operand) {
  checks::expect_dtype(t, d, Device::cuda, op, operand);
}
void expect_float(const Tensor& t, const char* op, const char* operand) {
  checks::expect_float(t, Device::cuda, op, operand);
}
using checks::expect_cols;
using checks::expect_rows;
using checks::expect_runs;
using checks::expect_unit_col_stride;

void expect_contiguous(const Tensor& t, const char* op, const char* operand) {
  if (!t.is_contiguous())
    fail(ErrorKind::invalid_argument, "{}: {} must be contiguous", op, operand);
}

// An elementwise operand as rows of contiguous columns: 2-D views as they
// are; rank 1 as one row when unit-stride, else one column; rank 3-4 as
// [shape[0], the rest] when the inner dimensions are contiguous.
struct Rows {
  void* data;
  int64_t rows, cols, ld;
};

Rows as_rows(const Tensor& t, const char* op, const char* operand) {
  if (t.rank == 1)
    return t.stride[0] == 1 ? Rows{t.data, 1, t.shape[0], t.shape[0]}
                            : Rows{t.data, t.shape[0], 1, t.stride[0]};
  int64_t inner = 1;
  for (int d = t.rank - 1; d >= 1; --d) {
    if (t.shape[size_t(d)] != 1 && t.stride[size_t(d)] != inner)
      fail(ErrorKind::invalid_argument, "{}: {} must have contiguous rows", op, operand);
    inner *= t.shape[size_t(d)];
  }
  return Rows{t.data, t.shape[0], inner, t.stride[0]};
}

void expect_same_shape(const Tensor& a, const Tensor& b, const char* op) {
  if (a.rank != b.rank || a.shape != b.shape)
    fail(ErrorKind::invalid_argument, "{}: shapes differ ([{}, {}] vs [{}, {}])", op, a.rows(),
         a.cols(), b.rows(), b.cols());
}

// x and y of an elementwise op, mapped alike (a 1-D pair with one strided
// side becomes two columns).
std::pair<Rows, Rows> as_rows2(const Tensor& x, const Tensor& y, const char* op) {
  expect_same_shape(x, y, op);
  if (x.rank == 1 && (x.stride[0] != 1 || y.stride[0] != 1))
    return {Rows{x.data, x.shape[0], 1, x.stride[0]}, Rows{y.data, y.shape[0], 1, y.stride[0]}};
  return {as_rows(x, op, "x"), as_rows(y, op, "y")};
}

}  // namespace

// ---- construction and weight views --------------------------------------------------

CudaBackend::CudaBackend(Arena& scratch, cudaStream_t stream, AttnKernel attn, GemmKernel gemm)
    : scratch_(scratch),
      stream_(stream),
      attn_default_(attn),
      attn_(attn),
      gemm_default_(gemm),
      gemm_(gemm) {
  if (scratch.device() != Device::cuda)
    fail(ErrorKind::invalid_argument,
         "cuda backend: the scratch arena must be device memory (an Arena over CudaMemory)");
  check(cudaGetDevice(&device_), "cuda backend: device");
  arch::expect_supported_device();  // sm_80 or newer: the oldest image this build carries
  check_request(attn_, kernel_arch());
  if (!stream_) {
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cuda backend: stream");
    own_stream_ = true;
  }
}

CudaBackend::~CudaBackend() {
  (void)cudaStreamSynchronize(stream_);
  if (own_stream_) (void)cudaStreamDestroy(stream_);
}

void CudaBackend::use_kernels(AttnKernel attn, GemmKernel gemm) {
  attn = attn == AttnKernel::automatic ? attn_default_ : attn;
  check_request(attn, kernel_arch());
  attn_ = attn;
  gemm_ = gemm == GemmKernel::automatic ? gemm_default_ : gemm;
}

DeviceWeights DeviceWeights::of(const QuantLinear& w) {
  DeviceWeights d;
  d.format = w.format;
  d.out = w.out;
  d.in = w.in;
  d.w_bf16 = w.w_bf16.data();
  d.w_f32 = w.w_f32.data();
  d.w_i8 = w.w_i8.data();
  d.w4_codes = w.w4_codes.data();
  d.w4_s_rel = w.w4_s_rel.data();
  d.w4_levels = w.w4_codebook.data();
  d.w_scale = w.w_scale.data();
  d.bias = w.has_bias() ? w.bias.data() : nullptr;
  return d;
}

Buffer CudaBackend::mod_rows(std::span<const ModRun> runs, int64_t rows) {
  Buffer b = scratch_.allocate(size_t(rows) * sizeof(int32_t), "modulation row index");
  int32_t* p = static_cast<int32_t*>(b.data());
  ModRunBatch batch;
  bool first = true;
  auto flush = [&] {
    fill_mod_rows(p, rows, batch, first, stream_);
    first = false;
    batch.count = 0;
  };
  for (const ModRun& r : runs) {
    batch.begin[batch.count] = r.begin;
    batch.end[batch.count] = r.end;
    batch.mod_row[batch.count] = r.mod_row;
    if (++batch.count == kModRunBatch) flush();
  }
  if (first || batch.count > 0) flush();
  return b;
}

// ---- norms ------------------------------------------------------------------------

void CudaBackend::rms_norm_mod(const Tensor& x, const Tensor& gamma, float eps, const ModTable* mod,
                               std::span<const ModRun> runs, const Tensor& out) {
  const char* op = "rms_norm_mod";
  checks::rms_norm_mod_args(x, gamma, mod, runs, out, Device::cuda);
  const int64_t rows = x.rows(), h = x.cols();
  expect_contiguous(gamma, op, "gamma");
  const uint16_t *shift = nullptr, *scale = nullptr;
  int64_t ld_mod = 0;
  Buffer row_mod;
  if (mod) {
    if (mod->shift.rows() > 1 && mod->shift.stride[0] != mod->scale.stride[0])
      fail(ErrorKind::invalid_argument,
           "{}: shift and scale must share a row stride (got {} and {}); slice both from one "
           "adaLN output",
           op, mod->shift.stride[0], mod->scale.stride[0]);
    shift = mod->shift.ptr<uint16_t>();
    scale = mod->scale.ptr<uint16_t>();
    ld_mod = mod->shift.stride[0];
  }
  if (rows == 0) return;
  if (mod && !runs.empty()) row_mod = mod_rows(runs, rows);
  cuda::rms_norm_mod(x.ptr<uint16_t>(), x.stride[0], gamma.ptr<uint16_t>(), eps, shift, scale,
                     ld_mod, static_cast<const int32_t*>(row_mod.data()), out.ptr<uint16_t>(),
                     out.stride[0], rows, h, stream_);
}

void CudaBackend::qk_norm_rope(const Tensor& t, const Tensor& w, const Tensor& rope, float eps,
                               int64_t rot_dim) {
  checks::qk_norm_rope_args(t, w, rope, rot_dim, Device::cuda);
  constexpr int64_t kHead = 128;
  const uint16_t* rp = rot_dim > 0 ? rope.ptr<uint16_t>() : nullptr;
  const int64_t ld_rope = rot_dim > 0 ? rope.stride[0] : 0;
  cuda::qk_norm_rope(t.ptr<uint16_t>(), t.stride[0], t.rows(), t.cols() / kHead, w.ptr<uint16_t>(),
                     rp, ld_rope, eps, rot_dim, stream_);
}

// ---- linear layers -----------------------------------------------------------------

void CudaBackend::quantized_linear(const uint16_t* x, int64_t ldx, ActInput input, int64_t m,
                                   const DeviceWeights& w, int64_t f0, int64_t n, const Tensor& y) {
  const int64_t k = w.in;
  Buffer xq = scratch_.allocate(size_t(m * k), "int8 activation rows");
  Buffer xs = scratch_.allocate(size_t(m) * sizeof(float), "int8 activation row scales");
  int8_t* q = static_cast<int8_t*>(xq.data());
  float* s = static_cast<float*>(xs.data());
  quantize_convrot(x, ldx, input, q, k, s, m, k, stream_);
  const float* bias = w.bias ? w.bias + f0 : nullptr;
  if (w.format == WeightFormat::w4a8) {
    // Features [f0, f0 + n) are rows f0.. of every packed array.
    gemm_w4a8(q, k, s, w.w4_codes + f0 * (k / 2), w.w4_s_rel + f0 * (k / kW4Group), w.w4_levels,
              w.w_scale + f0, bias, y.ptr<uint16_t>(), y.stride[0], m, n, k, gemm_, stream_);
    return;
  }
  gemm_i8(q, k, s, w.w_i8 + f0 * k, w.w_scale + f0, bias, y.ptr<uint16_t>(), y.stride[0], m, n, k,
          gemm_, stream_);
}

void CudaBackend::linear(const Tensor& x, const QuantLinear& w, const Tensor& y,
                         RowRange features) {
  features = checks::linear_args(x, w, y, features, Device::cuda);
  const int64_t m = x.rows(), n = features.size(), k = w.in, f0 = features.begin;
  if (m == 0 || n == 0) return;
  const DeviceWeights d = DeviceWeights::of(w);
  const float* bias = d.bias ? d.bias + f0 : nullptr;
  switch (w.format) {
    case WeightFormat::f32:
      gemm_f32(x.ptr<float>(), x.stride[0], d.w_f32 + f0 * k, bias, y.ptr<float>(), y.stride[0], m,
               n, k, stream_);
      return;
    case WeightFormat::bf16:
    case WeightFormat::nvfp4:
      gemm_bf16(x.ptr<uint16_t>(), x.stride[0], d.w_bf16 + f0 * k, bias, y.ptr<uint16_t>(),
                y.stride[0], m, n, k, gemm_, stream_);
      return;
    case WeightFormat::int8:
    case WeightFormat::w4a8:
      quantized_linear(x.ptr<uint16_t>(), x.stride[0], ActInput::bf16, m, d, f0, n, y);
      return;
  }
}

void CudaBackend::swiglu_linear(const Tensor& f, const QuantLinear& w, const Tensor& y) {
  const char* op = "swiglu_linear";
  checks::expect_prepared(w, Device::cuda, op);
  if (w.format == WeightFormat::f32)
    fail(ErrorKind::invalid_argument, "{}: fc2 weight must be bf16, int8 or w4a8", op);
  expect_dtype(f, DType::bf16, op, "f");
  expect_dtype(y, DType::bf16, op, "y");
  expect_unit_col_stride(f, op, "f");
  expect_unit_col_stride(y, op, "y");
  expect_cols(f, 2 * w.in, op, "f");
  expect_cols(y, w.out, op, "y");
  expect_rows(y, f.rows(), op, "y");
  const int64_t m = f.rows(), ffn = w.in;
  if (m == 0 || w.out == 0) return;
  const DeviceWeights d = DeviceWeights::of(w);
  switch (w.format) {
    case WeightFormat::int8:  // comfy-kitchen's fused fp32 SwiGLU quantiser
      quantized_linear(f.ptr<uint16_t>(), f.stride[0], ActInput::swiglu_f32, m, d, 0, w.out, y);
      return;
    case WeightFormat::w4a8:  // eager bf16 SwiGLU, quantised on the fly
      quantized_linear(f.ptr<uint16_t>(), f.stride[0], ActInput::swiglu_bf16, m, d, 0, w.out, y);
      return;
    case WeightFormat::bf16:
    case WeightFormat::nvfp4: {
      Buffer act = scratch_.allocate(size_t(m * ffn) * sizeof(uint16_t), "swiglu activations");
      uint16_t* a = static_cast<uint16_t*>(act.data());
      swiglu_bf16(f.ptr<uint16_t>(), f.stride[0], a, ffn, m, ffn, stream_);
      gemm_bf16(a, ffn, d.w_bf16, d.bias, y.ptr<uint16_t>(), y.stride[0], m, w.out, ffn, gemm_,
                stream_);
      return;
    }
    case WeightFormat::f32:
      return;  // rejected above
  }
}

// ---- attention ---------------------------------------------------------------------

void expect_attn_state(const AttnState& s, const char* op) {
  constexpr int64_t kHeadDim = 128;  // the attention kernels' head size (kernels.hpp)
  if (s.head_dim != kHeadDim)
    fail(ErrorKind::invalid_argument, "{}: head_dim {} is not supported (the kernels need {})", op,
         s.head_dim, kHeadDim);
  expect_dtype(s.m.view, DType::f32, op, "state m");
  expect_dtype(s.l.view, DType::f32, op, "state l");
  expect_dtype(s.acc.view, DType::f32, op, "state acc");
  if (s.m.view.numel() != s.rows * s.heads || s.l.view.numel() != s.rows * s.heads ||
      s.acc.view.numel() != s.rows * s.heads * s.head_dim || !s.m.view.is_contiguous() ||
      !s.l.view.is_contiguous() || !s.acc.view.is_contiguous())
    fail(ErrorKind::invalid_argument,
         "{}: state tensors must be contiguous [rows, heads(, head_dim)] (AttnState::allocate)",
         op);
}

void CudaBackend::attn_state_reset(AttnState& s) {
  expect_attn_state(s, "attn_state_reset");
  attention_reset(s.m.view.ptr<float>(), s.l.view.ptr<float>(), s.acc.view.ptr<float>(), s.rows,
                  s.heads, stream_);
}

void CudaBackend::attention_with_ends(const Tensor& q, const KvView& kv, RowRange keys,
                                      AttnState& s, AttnEnds ends) {
  const char* op = "attention";
  expect_attn_state(s, op);
  const int64_t hd = s.head_dim, heads = s.heads, rows = q.rows();
  checks::attention_args(q, kv, keys, s.rows, heads, hd, Device::cuda, op);
  if (kv.v.stride[0] != kv.k.stride[0] || kv.v.stride[1] != kv.k.stride[1])
    fail(ErrorKind::invalid_argument,
         "{}: k and v must share seq and head strides (k {}/{}, v {}/{})", op, kv.k.stride[0],
         kv.k.stride[1], kv.v.stride[0], kv.v.stride[1]);
  if (ends.out != nullptr) {
    expect_dtype(*ends.out, DType::bf16, op, "out");
    expect_rows(*ends.out, rows, op, "out");
    expect_cols(*ends.out, heads * hd, op, "out");
    expect_unit_col_stride(*ends.out, op, "out");
  }
  if (rows == 0) return;
  const cuda::attn::FwdParams p{
      q.ptr<uint16_t>(),
      q.stride[0],
      rows,
      heads,
      kv.k.ptr<uint16_t>(),
      kv.v.ptr<uint16_t>(),
      kv.k.stride[0],
      kv.k.stride[1],
      keys.begin,
      keys.end,
      s.m.view.ptr<float>(),
      s.l.view.ptr<float>(),
      s.acc.view.ptr<float>(),
      kv.k.dtype == DType::f16 ? cuda::attn::KvType::f16 : cuda::attn::KvType::bf16};
  const cuda::attn::FwdEnds fe{ends.fresh, ends.out ? ends.out->ptr<uint16_t>() : nullptr,
                               ends.out ? ends.out->stride[0] : 0};
  attention_fwd(p, fe, attn_, stream_);
}

void CudaBackend::attention(const Tensor& q, const KvView& kv, RowRange keys, AttnState& s) {
  attention_with_ends(q, kv, keys, s, {});
}

void CudaBackend::attn_state_finish(const AttnState& s, const Tensor& out) {
  const char* op = "attn_state_finish";
  expect_attn_state(s, op);
  expect_dtype(out, DType::bf16, op, "out");
  expect_rows(out, s.rows, op, "out");
  expect_cols(out, s.heads * s.head_dim, op, "out");
  expect_unit_col_stride(out, op, "out");
  attention_finish(s.l.view.ptr<float>(), s.acc.view.ptr<float>(), out.ptr<uint16_t>(),
                   out.stride[0], s.rows, s.heads, stream_);
}

// ---- residuals and elementwise ops -----------------------------------------------------

void CudaBackend::gated_residual(const Tensor& x, const Tensor& y, const Tensor& gate,
                                 std::span<const ModRun> runs) {
  const char* op = "gated_residual";
  expect_dtype(x, DType::bf16, op, "x");
  expect_dtype(y, DType::bf16, op, "y");
  expect_dtype(gate, DType::bf16, op, "gate");
  expect_unit_col_stride(x, op, "x");
  expect_unit_col_stride(y, op, "y");
  expect_unit_col_stride(gate, op, "gate");
  expect_rows(y, x.rows(), op, "y");
  expect_cols(y, x.cols(), op, "y");
  expect_cols(gate, x.cols(), op, "gate");
  expect_runs(runs, x.rows(), gate.rows(), op);
  // The CPU applies run after run; a row in two runs would be gated twice there
  // and once here, so overlapping runs are refused.
  for (size_t i = 1; i < runs.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (runs[i].begin < runs[j].end && runs[j].begin < runs[i].end &&
          runs[i].begin < runs[i].end && runs[j].begin < runs[j].end)
        fail(ErrorKind::invalid_argument, "{}: runs [{}, {}) and [{}, {}) overlap", op,
             runs[j].begin, runs[j].end, runs[i].begin, runs[i].end);
  if (runs.empty() || x.rows() == 0) return;
  Buffer row_mod = mod_rows(runs, x.rows());
  cuda::gated_residual(x.ptr<uint16_t>(), x.stride[0], y.ptr<uint16_t>(), y.stride[0],
                       gate.ptr<uint16_t>(), gate.stride[0],
                       static_cast<const int32_t*>(row_mod.data()), x.rows(), x.cols(), stream_);
}

void CudaBackend::add_residual(const Tensor& x, const Tensor& y) {
  const char* op = "add_residual";
  expect_dtype(x, DType::bf16, op, "x");
  expect_dtype(y, DType::bf16, op, "y");
  const auto [xr, yr] = as_rows2(x, y, op);
  cuda::add_residual(static_cast<uint16_t*>(xr.data), xr.ld, static_cast<const uint16_t*>(yr.data),
                     yr.ld, xr.rows, xr.cols, stream_);
}

void CudaBackend::silu(const Tensor& x, const Tensor& y) {
  const char* op = "silu";
  expect_float(x, op, "x");
  expect_dtype(y, x.dtype, op, "y");
  const auto [xr, yr] = as_rows2(x, y, op);
  cuda::silu(xr.data, xr.ld, yr.data, yr.ld, xr.rows, xr.cols, x.dtype == DType::f32, stream_);
}

void CudaBackend::convert(const Tensor& x, const Tensor& y) {
  const char* op = "convert";
  expect_float(x, op, "x");
  expect_float(y, op, "y");
  const auto [xr, yr] = as_rows2(x, y, op);
  cuda::convert(xr.data, x.dtype == DType::f32, xr.ld, yr.data, y.dtype == DType::f32, yr.ld,
                xr.rows, xr.cols, stream_);
}

void CudaBackend::scale(const Tensor& x, float alpha) {
  const char* op = "scale";
  expect_dtype(x, DType::f32, op, "x");
  const Rows r = as_rows(x, op, "x");
  scale_f32(static_cast<float*>(r.data), r.ld, r.rows, r.cols, alpha, stream_);
}

// ---- copies and transfers ------------------------------------------------------------------

void CudaBackend::copy(const Tensor& x, const Tensor& y) {
  const char* op = "copy";
  if (x.dtype != y.dtype)
    fail(ErrorKind::invalid_argument, "{}: dtypes differ ({} vs {})", op, dtype_name(x.dtype),
         dtype_name(y.dtype));
  if (x.rank != y.rank || x.shape != y.shape)
    fail(ErrorKind::invalid_argument, "{}: shapes differ", op);
  expect_device(x, op, "x");
  expect_device(y, op, "y");
  const int r = x.rank;
  if (r < 1 || x.numel() == 0) return;
  if (x.stride[size_t(r - 1)] != 1 || y.stride[size_t(r - 1)] != 1)
    fail(ErrorKind::invalid_argument, "{}: the innermost dimension must be unit-stride", op);
  const size_t es = dtype_size(x.dtype);
  const size_t width = size_t(x.shape[size_t(r - 1)]) * es;
  const auto* src = static_cast<const char*>(x.data);
  auto* dst = static_cast<char*>(y.data);
  if (r == 1) {
    check(cudaMemcpyAsync(dst, src, width, cudaMemcpyDeviceToDevice, stream_), "copy");
    return;
  }
  // Rank 2: one 2-D copy-engine transfer. Higher ranks (a K/V chunk into the
  // [heads, seq, 128] store is rows x heads separate pieces): one kernel, as
  // per-piece copy calls cost microseconds each.
  if (r == 2 && size_t(x.stride[0]) * es >= width && size_t(y.stride[0]) * es >= width) {
    const cudaError_t e =
        cudaMemcpy2DAsync(dst, size_t(y.stride[0]) * es, src, size_t(x.stride[0]) * es, width,
                          size_t(x.shape[0]), cudaMemcpyDeviceToDevice, stream_);
    if (e != cudaErrorInvalidPitchValue) return check(e, "copy");
    (void)cudaGetLastError();  // a pitch past the copy engine's limit: the kernel below
  }
  std::array<int64_t, 4> xs{}, ys{};
  for (int d = 0; d < r; ++d) {
    xs[size_t(d)] = x.stride[size_t(d)] * int64_t(es);
    ys[size_t(d)] = y.stride[size_t(d)] * int64_t(es);
  }
  cuda::copy_strided(src, xs.data(), dst, ys.data(), x.shape.data(), r, int64_t(es), stream_);
}

void CudaBackend::upload(const void* host, const Tensor& dst) {
  expect_device(dst, "upload", "dst");
  expect_contiguous(dst, "upload", "dst");
  const size_t bytes = size_t(dst.numel()) * dtype_size(dst.dtype);
  if (bytes == 0) return;
  // Pageable source: returns once staged, so `host` may be reused at once.
  check(cudaMemcpyAsync(dst.data, host, bytes, cudaMemcpyHostToDevice, stream_), "upload");
}

void CudaBackend::download(const Tensor& src, void* host) {
  expect_device(src, "download", "src");
  expect_contiguous(src, "download", "src");
  const size_t bytes = size_t(src.numel()) * dtype_size(src.dtype);
  if (bytes > 0)
    check(cudaMemcpyAsync(host, src.data, bytes, cudaMemcpyDeviceToHost, stream_), "download");
  check(cudaStreamSynchronize(stream_), "download");
}

void CudaBackend::synchronize() {
  check(cudaStreamSynchronize(stream_), "synchronize");
}

double CudaBackend::device_seconds(const std::function<void()>& enqueue) {
  cudaEvent_t start = nullptr, stop = nullptr;
  check(cudaEventCreate(&start), "device_seconds: event");
  check(cudaEventCreate(&stop), "device_seconds: event");
  float ms = 0.0f;
  try {
    check(cudaEventRecord(start, stream_), "device_seconds: record");
    enqueue();
    check(cudaEventRecord(stop, stream_), "device_seconds: record");
    check(cudaEventSynchronize(stop), "device_seconds: wait");
    check(cudaEventElapsedTime(&ms, start, stop), "device_seconds: elapsed");
  } catch (...) {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    throw;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return double(ms) / 1e3;
}

std::string_view CudaBackend::attention_kernel() const {
  const Kernel k = attention_choice(Op::attention, attn_);
  // the one-slab tile, forced (benchmarks record it apart from the device's own tile)
  if (k == Kernel::attn_sm80 && attn_sm80_slabs_forced(attn_) == 1) return "sm80-1slab";
  return kernel_name(k);
}

}  // namespace h3s::cuda

namespace h3s {

std::unique_ptr<Backend> make_cuda_backend(Arena& scratch, cudaStream_t stream, AttnKernel attn,
                                           GemmKernel gemm) {
  return std::make_unique<cuda::CudaBackend>(scratch, stream, attn, gemm);
}

}  // namespace h3s
