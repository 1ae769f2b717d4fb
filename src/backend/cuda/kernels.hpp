// Entry points of the CUDA kernels (one family per folder), called by
// CudaBackend. Plain C++ declarations (host code needs only the CUDA runtime
// header, through the attention parameter structs).
//
// Conventions: device pointers; matrices row-major with an explicit row stride
// in ELEMENTS; weights [N, K] row-major (checkpoint layout); bf16 passed as raw
// uint16_t bits; all 64-bit sizes and offsets (a 300k-token sequence x 21504
// features exceeds 2^31 elements); every launch on the given stream, no
// allocation, no synchronisation.
//
// Row invariance (backend.hpp): output row r depends only on input row r.
// No kernel chooses its algorithm, tile or split by the number of rows, and
// every reduction over K runs in a fixed order.
//
// Where a family has more than one kernel, the entry point takes the
// caller's request (ExecOptions::attn_kernel / gemm_kernel, through
// CudaBackend::use_kernels) and kernel_choice.hpp decides, per call.
#pragma once

#include <cstdint>

#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/kernel_choice.hpp"

typedef struct CUstream_st* cudaStream_t;

namespace h3s::cuda {

// ---- GEMMs (gemm/) ---------------------------------------------------------
// y[m, n] = bf16(sum_k x[m, k] * w[n, k] (+ bias[n])), fp32 accumulation in a
// fixed K order (no split-K).
void gemm_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w, const float* bias, uint16_t* y,
               int64_t ldy, int64_t m, int64_t n, int64_t k, GemmKernel want, cudaStream_t s);
// fp32 islands: y = x W^T (+ bias), fp32 in and out, fixed K order.
void gemm_f32(const float* x, int64_t ldx, const float* w, const float* bias, float* y, int64_t ldy,
              int64_t m, int64_t n, int64_t k, cudaStream_t s);
// int8 x int8 -> exact int32, epilogue y = bf16((float(acc) * xs[m]) * ws[n]) (+ bias).
void gemm_i8(const int8_t* xq, int64_t ldx, const float* xs, const int8_t* w, const float* ws,
             const float* bias, uint16_t* y, int64_t ldy, int64_t m, int64_t n, int64_t k,
             GemmKernel want, cudaStream_t s);
// gemm_i8 with W4A8 weights decoded to int8 inside the kernel: bit-identical
// to gemm_i8 on decode_w4a8's weights (model/quant_linear.hpp). codes: [n, k/2]
// 4-bit codes, even column in the low nibble; s_rel: e4m3 [n, k/16]; levels:
// 16 fp32 (the codebook, or code - 8); weight rows contiguous (strides k/2 and
// k/16 bytes); k a multiple of 32.
void gemm_w4a8(const int8_t* xq, int64_t ldx, const float* xs, const uint8_t* w_codes,
               const uint8_t* w_s_rel, const float* levels, const float* ws, const float* bias,
               uint16_t* y, int64_t ldy, int64_t m, int64_t n, int64_t k, GemmKernel want,
               cudaStream_t s);
// The kernel a GEMM family runs here for `want` (what benchmarks record).
Kernel gemm_choice(Op op, GemmKernel want);

// ---- int8 ConvRot activation quantiser (quant/) -----------------------------
// Bit-exact with h3s::quantize_row_convrot (model/convrot.cpp) per row; k a
// multiple of 256.
enum class ActInput : uint8_t {
  bf16,         // x: bf16 [m, k]
  swiglu_f32,   // x: bf16 [m, 2k] = [gate | up]; act = silu(g) * u in fp32 (IEEE)
  swiglu_bf16,  // same input; act = bf16(bf16(silu(g)) * u) (eager)
};
// NVFP4 -> bf16 as h3s::decode_nvfp4_values (model/quant_linear.hpp):
// w[n, k] = bf16(e2m1(code) * (e4m3(scale) * global)); codes
// [round16(out), round16(in) / 2] (even column in the high nibble), scales
// e4m3 in comfy-kitchen's swizzled [round128(N'), round4(K' / 16)] layout,
// w [out, in] contiguous.
void decode_nvfp4(const uint8_t* codes, const uint8_t* scales, float global, uint16_t* w,
                  int64_t out, int64_t in, cudaStream_t s);

void quantize_convrot(const uint16_t* x, int64_t ldx, ActInput input, int8_t* q, int64_t ldq,
                      float* scale, int64_t m, int64_t k, cudaStream_t s);

// ---- norms (norm/) ----------------------------------------------------------
// out = bf16((x * rstd) * gamma) then, where mod_row[r] >= 0,
// bf16(bf16(h * bf16(1 + scale[row])) + shift[row]). mod_row: device int32 [m].
void rms_norm_mod(const uint16_t* x, int64_t ldx, const uint16_t* gamma, float eps,
                  const uint16_t* shift, const uint16_t* scale, int64_t ld_mod,
                  const int32_t* mod_row, uint16_t* out, int64_t ldo, int64_t m, int64_t h,
                  cudaStream_t s);
// In place on t [m, heads * 128]: per head RMSNorm + split-half RoPE of the
// first rot_dim dims with rope [m, rot_dim / 2, 2] (cos, sin) bf16 (row stride
// ld_rope). Bit-exact with cpu::rms_rope_head.
void qk_norm_rope(uint16_t* t, int64_t ldt, int64_t m, int64_t heads, const uint16_t* w,
                  const uint16_t* rope, int64_t ld_rope, float eps, int64_t rot_dim,
                  cudaStream_t s);

// ---- attention (attention/) -------------------------------------------------
// Consume keys [key_begin, key_end) (key_begin a multiple of 128) into the
// online-softmax state of query rows q [rows, heads * 128] (row stride ldq).
// K/V element (s, h, d) at k[s * kv_seq_stride + h * kv_head_stride + d].
// State: m, l fp32 [rows, heads]; acc fp32 [rows, heads, 128]; read and
// written in place, so consecutive calls over aligned key blocks repeat the
// single-pass arithmetic. `ends` fuses the reset (fresh) and the finish (out)
// into the call where the kernel can; `want` picks the kernel
// (kernel_choice.hpp; fp16 K/V take the mma.sync kernel's fp16 instance).
void attention_fwd(const attn::FwdParams& p, const attn::FwdEnds& ends, AttnKernel want,
                   cudaStream_t s);
// The kernel `op` (the exact attention or a tier) runs on this device for
// `want`: kernel_choice.hpp's choose() for the device's architecture; throws
// naming the fix when the device cannot run the request (sm90 off Hopper).
Kernel attention_choice(Op op, AttnKernel want);
// out = bf16(acc / l), [rows, heads * 128] with row stride ldo.
void attention_finish(const float* l, const float* acc, uint16_t* out, int64_t ldo, int64_t rows,
                      int64_t heads, cudaStream_t s);
void attention_reset(float* m, float* l, float* acc, int64_t rows, int64_t heads, cudaStream_t s);

// ---- the kvi8r K/V tier (kv/, attention/) -------------------------------------
// Bit-exact with kvfmt/kvi8r.hpp per (row, head): src [rows, heads * 128] bf16
// -> biased codes (code + 128, row stride ldc) and fp16 scale bits, row r head h at
// scale[r * scale_row + h * scale_head] (the store's are head-major). Rows
// 8-byte aligned (lds, ldc multiples of 4).
void kvi8r_quantize(const uint16_t* src, int64_t lds, uint8_t* code, int64_t ldc, uint16_t* scale,
                    int64_t scale_row, int64_t scale_head, int64_t rows, int64_t heads,
                    cudaStream_t s);
// In place: t = bf16(rotate(t)) per 128-dim head.
void kvi8r_rotate_heads(uint16_t* t, int64_t ldt, int64_t rows, int64_t heads, cudaStream_t s);
// out = bf16(rotate(acc / l)) per (row, head).
void kvi8r_finish_rotated(const float* l, const float* acc, uint16_t* out, int64_t ldo,
                          int64_t rows, int64_t heads, cudaStream_t s);
// The tier's Hopper kernel (attn::KvI8rFwdParams; Kernel::kvi8r_sm90):
// continues the state, or starts it when fresh; the state always ends
// stored. Elsewhere (Kernel::kvi8r_decode) the backend runs its decode
// path: kvi8r_decode, then the exact kernel's fp16 instance.
void attention_kvi8r(const attn::KvI8rFwdParams& p, bool fresh, cudaStream_t s);
// Decodes keys [key_begin, key_begin + n) of every head to the fp16 K~ =
// fp16(code x scale) and V~ of kvfmt/kvi8r.hpp, the bits the Hopper kernel's
// producer writes: key r's head h at k + r * ldk + 128 h (and v). Codes
// [seq, heads * 128] biased bytes (16-byte aligned, row stride a multiple of
// 16), scales of key r head h at scale[r * scale_key + h * scale_head]; the
// outputs 16-byte aligned with ldk and ldv multiples of 8.
void kvi8r_decode(const uint8_t* k_code, const uint8_t* v_code, int64_t code_stride,
                  const uint16_t* k_scale, const uint16_t* v_scale, int64_t scale_key,
                  int64_t scale_head, int64_t key_begin, int64_t n, int64_t heads, uint16_t* k,
                  int64_t ldk, uint16_t* v, int64_t ldv, cudaStream_t s);
// The kvi8s tier's attention (kvfmt/kvi8s.hpp): int8 Q K^T, fp8 P V, on
// wgmma (Kernel::kvi8s_sm90) or mma.sync (Kernel::kvi8s_sm89: sm_89 and
// newer); the state always ends stored. `k` is attention_choice's (none:
// refused, naming the fix).
void attention_kvi8s(const attn::KvI8sFwdParams& p, Kernel k, cudaStream_t s);
// K/V rows [first_row, first_row + n) of a tier's quantiser, given as up to
// two row-wise parts (a kept tail, then the chunk).
struct KvRowParts {
  const uint16_t* k[2];
  const uint16_t* v[2];
  int64_t ldk[2], ldv[2];
  int64_t rows[2];
};
// Quantises K/V rows into the kvi8s store, bit-exact with
// kvi8s::quantise_tile: n whole tiles unless they end the sequence.
void kvi8s_quantize(const KvRowParts& in, int64_t first_row, int64_t heads, int8_t* k_code,
                    int64_t code_stride, uint8_t* v_code, int64_t v_stride, uint8_t* header,
                    cudaStream_t s);
// The kvfp4s store (kvfmt/kvfp4s.hpp): codes [seq, heads * 64] and e4m3 scales
// [seq, heads * 8] of K and V (shared row strides), per (stat block, head)
// the fp32 globals [blocks, global_stride] and K's bf16 means [blocks,
// mean_stride].
struct Kvfp4sStore {
  uint8_t *k_code, *v_code, *k_scale, *v_scale;
  int64_t code_stride, scale_stride;
  float *k_global, *v_global;
  int64_t global_stride;
  uint16_t* k_mean;
  int64_t mean_stride;
};
// Quantises K/V rows into it, bit-exact with kvfp4s::quantise_{k,v}_block:
// n whole 256-token stat blocks unless they end the sequence.
void kvfp4s_quantize(const KvRowParts& in, int64_t first_row, int64_t heads, const Kvfp4sStore& out,
                     cudaStream_t s);
// The kvfp4s tier's Hopper kernel (Kernel::kvfp4s_sm90, a comparison run's:
// the decode path, kvfp4s_decode then the exact kernel, is the default on
// every GPU): the codes decoded to bf16 in shared memory, the exact
// kernel's consumers; the state always ends stored.
void attention_kvfp4s(const attn::KvFp4sFwdParams& p, cudaStream_t s);
// Decodes keys [key_begin, key_begin + n) of every head to the bf16 K~ and
// V~ kvfmt/kvfp4s.hpp defines, the bits the Hopper kernel's producer writes:
// key r's head h at k + r * ldk + 128 h (and v). Codes 8-byte aligned with
// an 8-byte code row stride, the means 4-byte aligned, the outputs 16-byte
// aligned with ldk and ldv multiples of 8.
void kvfp4s_decode(const Kvfp4sStore& store, int64_t key_begin, int64_t n, int64_t heads,
                   uint16_t* k, int64_t ldk, uint16_t* v, int64_t ldv, cudaStream_t s);

// ---- elementwise (elementwise/) ---------------------------------------------
// Per run row r (mod_row[r] >= 0): x = bf16(x + y * gate[mod_row[r]]); the
// product rounds to fp32, then the sum, then one bf16 rounding.
void gated_residual(uint16_t* x, int64_t ldx, const uint16_t* y, int64_t ldy, const uint16_t* gate,
                    int64_t ld_gate, const int32_t* mod_row, int64_t m, int64_t h, cudaStream_t s);
void add_residual(uint16_t* x, int64_t ldx, const uint16_t* y, int64_t ldy, int64_t m, int64_t h,
                  cudaStream_t s);  // x = bf16(y + x)
// y = SiLU(x) (bf16 or f32 by `f32`), x may equal y.
void silu(const void* x, int64_t ldx, void* y, int64_t ldy, int64_t m, int64_t n, bool f32,
          cudaStream_t s);
// dtype conversion between bf16 and f32 (RNE), any direction including same.
void convert(const void* x, bool x_f32, int64_t ldx, void* y, bool y_f32, int64_t ldy, int64_t m,
             int64_t n, cudaStream_t s);
void scale_f32(float* x, int64_t ldx, int64_t m, int64_t n, float alpha, cudaStream_t s);
// eager bf16 SwiGLU: y[m, ffn] = bf16(bf16(silu(g)) * u) for f = [g | u].
// y = x for views of rank 1..4 whose innermost dimension is unit-stride;
// strides in BYTES, elem_bytes 1/2/4/8. One launch whatever the outer shape.
void copy_strided(const void* x, const int64_t* x_stride_bytes, void* y,
                  const int64_t* y_stride_bytes, const int64_t* shape, int rank, int64_t elem_bytes,
                  cudaStream_t s);
void swiglu_bf16(const uint16_t* f, int64_t ldf, uint16_t* y, int64_t ldy, int64_t m, int64_t ffn,
                 cudaStream_t s);

}  // namespace h3s::cuda
