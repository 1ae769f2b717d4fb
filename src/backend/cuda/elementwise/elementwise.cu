// Elementwise kernels: residual adds, SiLU, dtype conversion, fp32 scaling and
// the eager bf16 SwiGLU. Each output element is one fixed expression of its
// inputs (the CPU's, backend/cpu/elementwise.cpp and math.hpp, with every
// rounding spelled __f*_rn), so results are row-invariant and bit-exact with
// the CPU; the exception is expf inside SiLU and SwiGLU, where CUDA's expf
// (max 2 ulp) and glibc's (correctly rounded in nearly all cases) may
// disagree in the last bit (common.cuh silu_f32).
//
// Shape of every launch: a thread takes 8 consecutive columns of one row (one
// 16-byte load of bf16 when every operand is aligned, scalar otherwise: the
// same values either way), a CTA 1024 columns, grid.y strides over rows.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kPack = 8;
constexpr int64_t kColsPerCta = int64_t(kThreads) * kPack;
constexpr int64_t kMaxGridY = 65535;

// ---- packet loads and stores ---------------------------------------------------
// `full` is true when all 8 columns exist and every operand allows 16-byte
// access (uniform per launch, see vec_ok below).

__device__ __forceinline__ void load_bf16(const uint16_t* p, int n, bool full, float v[kPack]) {
  if (full) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    const uint16_t* b = reinterpret_cast<const uint16_t*>(&u);
#pragma unroll
    for (int j = 0; j < kPack; ++j) v[j] = bf16_to_f32(b[j]);
  } else {
#pragma unroll
    for (int j = 0; j < kPack; ++j) v[j] = j < n ? bf16_to_f32(p[j]) : 0.0f;
  }
}

__device__ __forceinline__ void store_bf16(uint16_t* p, int n, bool full, const float v[kPack]) {
  uint16_t b[kPack];
#pragma unroll
  for (int j = 0; j < kPack; ++j) b[j] = f32_to_bf16(v[j]);
  if (full) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(b);
  } else {
#pragma unroll
    for (int j = 0; j < kPack; ++j)
      if (j < n) p[j] = b[j];
  }
}

__device__ __forceinline__ void load_f32(const float* p, int n, bool full, float v[kPack]) {
  if (full) {
    *reinterpret_cast<float4*>(v) = *reinterpret_cast<const float4*>(p);
    *reinterpret_cast<float4*>(v + 4) = *reinterpret_cast<const float4*>(p + 4);
  } else {
#pragma unroll
    for (int j = 0; j < kPack; ++j) v[j] = j < n ? p[j] : 0.0f;
  }
}

__device__ __forceinline__ void store_f32(float* p, int n, bool full, const float v[kPack]) {
  if (full) {
    *reinterpret_cast<float4*>(p) = *reinterpret_cast<const float4*>(v);
    *reinterpret_cast<float4*>(p + 4) = *reinterpret_cast<const float4*>(v + 4);
  } else {
#pragma unroll
    for (int j = 0; j < kPack; ++j)
      if (j < n) p[j] = v[j];
  }
}

// A bf16 or fp32 operand chosen at run time (convert, silu).
__device__ __forceinline__ void load_any(const void* p, bool f32, int n, bool full,
                                         float v[kPack]) {
  if (f32)
    load_f32(static_cast<const float*>(p), n, full, v);
  else
    load_bf16(static_cast<const uint16_t*>(p), n, full, v);
}

__device__ __forceinline__ void store_any(void* p, bool f32, int n, bool full,
                                          const float v[kPack]) {
  if (f32)
    store_f32(static_cast<float*>(p), n, full, v);
  else
    store_bf16(static_cast<uint16_t*>(p), n, full, v);
}

// ---- the ops: operator()(row, first column, columns, full) -------------------

struct GatedResidual {
  uint16_t* x;
  int64_t ldx;
  const uint16_t* y;
  int64_t ldy;
  const uint16_t* gate;
  int64_t ld_gate;
  const int32_t* mod_row;
  bool vec;
  __device__ void operator()(int64_t r, int64_t c, int n) const {
    const int32_t g = mod_row[r];
    if (g < 0) return;  // row outside every run: untouched
    const bool full = vec && n == kPack;
    float xv[kPack], yv[kPack], gv[kPack];
    load_bf16(x + r * ldx + c, n, full, xv);
    load_bf16(y + r * ldy + c, n, full, yv);
    load_bf16(gate + int64_t(g) * ld_gate + c, n, full, gv);
#pragma unroll
    for (int j = 0; j < kPack; ++j) xv[j] = __fadd_rn(xv[j], __fmul_rn(yv[j], gv[j]));
    store_bf16(x + r * ldx + c, n, full, xv);
  }
};

struct AddResidual {
  uint16_t* x;
  int64_t ldx;
  const uint16_t* y;
  int64_t ldy;
  bool vec;
  __device__ void operator()(int64_t r, int64_t c, int n) const {
    const bool full = vec && n == kPack;
    float xv[kPack], yv[kPack];
    load_bf16(x + r * ldx + c, n, full, xv);
    load_bf16(y + r * ldy + c, n, full, yv);
#pragma unroll
    for (int j = 0; j < kPack; ++j) xv[j] = __fadd_rn(yv[j], xv[j]);  // bf16(y + x)
    store_bf16(x + r * ldx + c, n, full, xv);
  }
};

struct Silu {
  const void* x;
  int64_t ldx;
  void* y;
  int64_t ldy;
  bool f32, vec;
  __device__ void operator()(int64_t r, int64_t c, int n) const {
    const bool full = vec && n == kPack;
    const int64_t es = f32 ? 4 : 2;
    float v[kPack];
    load_any(static_cast<const char*>(x) + (r * ldx + c) * es, f32, n, full, v);
#pragma unroll
    for (int j = 0; j < kPack; ++j) v[j] = silu_f32(v[j]);
    store_any(static_cast<char*>(y) + (r * ldy + c) * es, f32, n, full, v);
  }
};

struct Convert {
  const void* x;
  int64_t ldx;
  void* y;
  int64_t ldy;
  bool x_f32, y_f32, vec;
  __device__ void operator()(int64_t r, int64_t c, int n) const {
    const bool full = vec && n == kPack;
    float v[kPack];
    load_any(static_cast<const char*>(x) + (r * ldx + c) * (x_f32 ? 4 : 2), x_f32, n, full, v);
    store_any(static_cast<char*>(y) + (r * ldy + c) * (y_f32 ? 4 : 2), y_f32, n, full, v);
  }
};

struct ScaleF32 {
  float* x;
  int64_t ldx;
  float alpha;
  bool vec;
  __device__ void operator()(int64_t r, int64_t c, int n) const {
    const bool full = vec && n == kPack;
    float v[kPack];
    load_f32(x + r * ldx + c, n, full, v);
#pragma unroll
    for (int j = 0; j < kPack; ++j) v[j] = __fmul_rn(alpha, v[j]);
    store_f32(x + r * ldx + c, n, full, v);
  }
};

struct SwigluBf16 {
  const uint16_t* f;
  int64_t ldf;
  uint16_t* y;
  int64_t ldy;
  int64_t ffn;
  bool vec;
  __device__ void operator()(int64_t r, int64_t c, int n) const {
    const bool full = vec && n == kPack;
    float g[kPack], u[kPack];
    load_bf16(f + r * ldf + c, n, full, g);
    load_bf16(f + r * ldf + ffn + c, n, full, u);
#pragma unroll
    for (int j = 0; j < kPack; ++j)
      g[j] = __fmul_rn(round_bf16(silu_f32(g[j])), u[j]);  // cpu::swiglu_bf16
    store_bf16(y + r * ldy + c, n, full, g);
  }
};

template <class Op>
__global__ void __launch_bounds__(kThreads) rows_kernel(Op op, int64_t m, int64_t n) {
  const int64_t c = int64_t(blockIdx.x) * kColsPerCta + int64_t(threadIdx.x) * kPack;
  if (c >= n) return;
  const int cnt = int(n - c < kPack ? n - c : kPack);
  for (int64_t r = blockIdx.y; r < m; r += gridDim.y) op(r, c, cnt);
}

template <class Op>
void launch(const Op& op, int64_t m, int64_t n, cudaStream_t s, const char* name) {
  if (m <= 0 || n <= 0) return;
  const int64_t bx = (n + kColsPerCta - 1) / kColsPerCta;
  if (bx > 0x7fffffff) fail_internal("elementwise: too many columns in one call");
  const dim3 grid(unsigned(bx), unsigned(std::min(m, kMaxGridY)));
  rows_kernel<<<grid, kThreads, 0, s>>>(op, m, n);
  check_launch(name);
}

// 16-byte packets are safe when each operand's base is 16-byte aligned and
// its row stride keeps every row (and so every 8-column packet) aligned.
bool vec_ok(const void* p, int64_t ld, int64_t elem_bytes) {
  return aligned_to(p, 16) && (ld * elem_bytes) % 16 == 0;
}

}  // namespace

void gated_residual(uint16_t* x, int64_t ldx, const uint16_t* y, int64_t ldy, const uint16_t* gate,
                    int64_t ld_gate, const int32_t* mod_row, int64_t m, int64_t h, cudaStream_t s) {
  const bool vec = vec_ok(x, ldx, 2) && vec_ok(y, ldy, 2) && vec_ok(gate, ld_gate, 2);
  launch(GatedResidual{x, ldx, y, ldy, gate, ld_gate, mod_row, vec}, m, h, s, "gated_residual");
}

void add_residual(uint16_t* x, int64_t ldx, const uint16_t* y, int64_t ldy, int64_t m, int64_t h,
                  cudaStream_t s) {
  const bool vec = vec_ok(x, ldx, 2) && vec_ok(y, ldy, 2);
  launch(AddResidual{x, ldx, y, ldy, vec}, m, h, s, "add_residual");
}

void silu(const void* x, int64_t ldx, void* y, int64_t ldy, int64_t m, int64_t n, bool f32,
          cudaStream_t s) {
  const int64_t es = f32 ? 4 : 2;
  const bool vec = vec_ok(x, ldx, es) && vec_ok(y, ldy, es);
  launch(Silu{x, ldx, y, ldy, f32, vec}, m, n, s, "silu");
}

void convert(const void* x, bool x_f32, int64_t ldx, void* y, bool y_f32, int64_t ldy, int64_t m,
             int64_t n, cudaStream_t s) {
  const bool vec = vec_ok(x, ldx, x_f32 ? 4 : 2) && vec_ok(y, ldy, y_f32 ? 4 : 2);
  launch(Convert{x, ldx, y, ldy, x_f32, y_f32, vec}, m, n, s, "convert");
}

void scale_f32(float* x, int64_t ldx, int64_t m, int64_t n, float alpha, cudaStream_t s) {
  launch(ScaleF32{x, ldx, alpha, vec_ok(x, ldx, 4)}, m, n, s, "scale_f32");
}

void swiglu_bf16(const uint16_t* f, int64_t ldf, uint16_t* y, int64_t ldy, int64_t m, int64_t ffn,
                 cudaStream_t s) {
  const bool vec = vec_ok(f, ldf, 2) && ffn % 8 == 0 && vec_ok(y, ldy, 2);
  launch(SwigluBf16{f, ldf, y, ldy, ffn, vec}, m, ffn, s, "swiglu_bf16");
}

}  // namespace h3s::cuda
