// kvfp4s' decode as a kernel of its own: keys [key_begin, key_begin + n) of
// every head to the bf16 K~ and V~ of kvfmt/kvfp4s.hpp, the bits the Hopper
// attention's producer writes into shared memory (the same arithmetic,
// kv/fp4_decode.cuh). GPUs without that kernel (sm_80 to sm_89, and
// Blackwell through the compute_80 PTX) decode a block of keys with this and
// run the exact attention kernel over it (CudaBackend::attention_kvfp4s).
//
// A thread per (key, head, 16-channel scale group): one 8-byte code load and
// one scale byte per operand, the group's 16 K means, two 32-byte stores per
// operand. Consecutive threads take consecutive groups of a row, so the
// loads and stores of a warp are contiguous.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kv/fp4_decode.cuh"
#include "kvfmt/kvfp4s.hpp"

namespace h3s::cuda {
namespace {

constexpr int kGroup = kvfp4s::kGroup;            // elements per scale: one thread
constexpr int kGroups = kvfp4s::kGroups;          // threads per (key, head)
constexpr int kGroupCodeBytes = kGroup / 2;       // two e2m1 codes a byte
constexpr int kHeadCodeBytes = kvfp4s::kDim / 2;  // a head's code bytes per key
constexpr int kPairs = kGroup / 2;                // bf16x2 words per group
constexpr int kStatShift = 8;                     // log2(kvfp4s::kBlock)
constexpr int kThreads = 256;
static_assert(int64_t(1) << kStatShift == kvfp4s::kBlock, "a key's stat block is key >> 8");
static_assert(kGroupCodeBytes == int(sizeof(uint2)), "a group's codes are one 8-byte load");

__device__ __forceinline__ void store_group(uint16_t* dst, const uint32_t (&o)[kPairs]) {
  uint4* d = reinterpret_cast<uint4*>(dst);
  d[0] = make_uint4(o[0], o[1], o[2], o[3]);
  d[1] = make_uint4(o[4], o[5], o[6], o[7]);
}

__global__ void __launch_bounds__(kThreads)
    kvfp4s_decode_kernel(Kvfp4sStore st, int64_t key_begin, int64_t n, int64_t heads, uint16_t* k,
                         int64_t ldk, uint16_t* v, int64_t ldv) {
  const int64_t item = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (item >= n * heads * kGroups) return;
  const int g = int(item % kGroups);
  const int64_t h = item / kGroups % heads, r = item / (kGroups * heads);
  const int64_t key = key_begin + r, block = key >> kStatShift;

  const int64_t code_at = key * st.code_stride + h * kHeadCodeBytes + g * kGroupCodeBytes;
  const int64_t scale_at = key * st.scale_stride + h * kGroups + g;
  const int64_t global_at = block * st.global_stride + h;
  const uint32_t* mean = reinterpret_cast<const uint32_t*>(st.k_mean + block * st.mean_stride +
                                                           h * kvfp4s::kDim + g * kGroup);
  const int64_t out_col = h * kvfp4s::kDim + g * kGroup;

  for (int operand = 0; operand < 2; ++operand) {
    const bool keys = operand == 0;
    const uint2 w = __ldg(reinterpret_cast<const uint2*>((keys ? st.k_code : st.v_code) + code_at));
    const uint32_t s = fp4s::e4m3_to_bf16(__ldg((keys ? st.k_scale : st.v_scale) + scale_at));
    const uint32_t s2 = s | s << 16;
    const uint32_t g2 = fp4s::global_bf16x2(__ldg((keys ? st.k_global : st.v_global) + global_at));
    uint32_t o[kPairs];
    fp4s::decode_e2m1x8(w.x, reinterpret_cast<uint32_t(&)[4]>(o[0]));
    fp4s::decode_e2m1x8(w.y, reinterpret_cast<uint32_t(&)[4]>(o[4]));
#pragma unroll
    for (int j = 0; j < kPairs; ++j) {
      const uint32_t x = fp4s::mul_bf16x2(o[j], s2);  // x^: exact
      o[j] = keys ? fp4s::fma_bf16x2(x, g2, __ldg(mean + j)) : fp4s::mul_bf16x2(x, g2);
    }
    store_group(keys ? k + r * ldk + out_col : v + r * ldv + out_col, o);
  }
}

}  // namespace

void kvfp4s_decode(const Kvfp4sStore& st, int64_t key_begin, int64_t n, int64_t heads, uint16_t* k,
                   int64_t ldk, uint16_t* v, int64_t ldv, cudaStream_t s) {
  if (n <= 0 || heads <= 0) return;
  const int64_t items = n * heads * kGroups;
  kvfp4s_decode_kernel<<<unsigned((items + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      st, key_begin, n, heads, k, ldk, v, ldv);
  check_launch("kvfp4s_decode");
}

}  // namespace h3s::cuda
