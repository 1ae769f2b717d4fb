// kvi8r's dequantisation as a kernel of its own: keys [key_begin, key_begin
// + n) of every head to the fp16 K~ = fp16(code x scale) and V~ of
// kvfmt/kvi8r.hpp, the bits the Hopper attention's producers write into shared
// memory (the same arithmetic, kv/i8r_decode.cuh). GPUs without that kernel
// (sm_80 to sm_89, and Blackwell through the compute_80 PTX) decode a block
// of keys with this and run the exact attention kernel's fp16 instance over
// it (CudaBackend::attention_kvi8r).
//
// A thread per (key, head, 16-code item): one 16-byte code load and one
// scale per operand, two 16-byte stores per operand. Consecutive threads
// take consecutive items of a row, so the loads and stores of a warp are
// contiguous.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kv/i8r_decode.cuh"
#include "kvfmt/kvi8r.hpp"

namespace h3s::cuda {
namespace {

constexpr int kItemCodes = int(sizeof(uint4));    // codes per thread: one 16-byte load
constexpr int kItems = kvi8r::kDim / kItemCodes;  // threads per (key, head)
constexpr int kItemWords = kItemCodes / 2;        // f16x2 words per item
constexpr int kThreads = 256;
static_assert(kvi8r::kDim % kItemCodes == 0, "a head's codes split into whole items");

// One item of one operand: 16 codes and their key's scale -> 16 fp16.
__device__ __forceinline__ void decode_item(const uint8_t* code, const uint16_t* scale,
                                            uint16_t* out) {
  const uint4 w = __ldg(reinterpret_cast<const uint4*>(code));
  const uint32_t s = __ldg(scale);
  const uint32_t s2 = s | s << 16;
  uint32_t o[kItemWords];
  i8r::dequant_f16(w.x, s2, o[0], o[1]);
  i8r::dequant_f16(w.y, s2, o[2], o[3]);
  i8r::dequant_f16(w.z, s2, o[4], o[5]);
  i8r::dequant_f16(w.w, s2, o[6], o[7]);
  uint4* d = reinterpret_cast<uint4*>(out);
  d[0] = make_uint4(o[0], o[1], o[2], o[3]);
  d[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

__global__ void __launch_bounds__(kThreads)
    kvi8r_decode_kernel(const uint8_t* k_code, const uint8_t* v_code, int64_t code_stride,
                        const uint16_t* k_scale, const uint16_t* v_scale, int64_t scale_key,
                        int64_t scale_head, int64_t key_begin, int64_t n, int64_t heads,
                        uint16_t* k, int64_t ldk, uint16_t* v, int64_t ldv) {
  const int64_t item = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= n * heads * kItems) return;
  const int i = int(item % kItems);
  const int64_t h = item / kItems % heads, r = item / (kItems * heads);
  const int64_t key = key_begin + r;
  const int64_t code_at = key * code_stride + h * kvi8r::kDim + i * kItemCodes;
  const int64_t scale_at = key * scale_key + h * scale_head;
  const int64_t out_col = h * kvi8r::kDim + i * kItemCodes;
  decode_item(k_code + code_at, k_scale + scale_at, k + r * ldk + out_col);
  decode_item(v_code + code_at, v_scale + scale_at, v + r * ldv + out_col);
}

}  // namespace

void kvi8r_decode(const uint8_t* k_code, const uint8_t* v_code, int64_t code_stride,
                  const uint16_t* k_scale, const uint16_t* v_scale, int64_t scale_key,
                  int64_t scale_head, int64_t key_begin, int64_t n, int64_t heads, uint16_t* k,
                  int64_t ldk, uint16_t* v, int64_t ldv, cudaStream_t s) {
  if (n <= 0 || heads <= 0) return;
  const int64_t items = n * heads * kItems;
  kvi8r_decode_kernel<<<unsigned((items + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      k_code, v_code, code_stride, k_scale, v_scale, scale_key, scale_head, key_begin, n, heads, k,
      ldk, v, ldv);
  check_launch("kvi8r_decode");
}

}  // namespace h3s::cuda
