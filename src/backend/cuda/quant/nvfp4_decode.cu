// NVFP4 weights decoded to bf16 on the device, bit-exact with the host
// decode (h3s::decode_nvfp4_values): ComfyUI hands NVFP4 layers over as
// device tensors, and decoding them there costs a pass over the weight
// instead of a copy to the host and a host loop per call.
//
// One thread per code byte (two weights of one row); every weight is one
// fp32 product of exact values rounded once, so the order of threads cannot
// change a bit.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/quant/e4m3.cuh"

namespace h3s::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kBlockCols = 16;  // K columns per e4m3 scale

__device__ __forceinline__ float e2m1_to_f32(uint32_t code) {
  // 0, 0.5, 1, 1.5, 2, 3, 4, 6: bit 3 is the sign. Twice the levels (0..12)
  // as nibbles of one constant, not an array: an indexed array sits on the
  // stack (kernel-resources.sh allows no stack frame). Exact: small integers
  // halved.
  constexpr uint32_t kTwiceLevels = 0xC8643210u;
  const float mag = float((kTwiceLevels >> (4u * (code & 0x7u))) & 0xFu) * 0.5f;
  return (code & 0x8u) != 0u ? -mag : mag;
}

// comfy-kitchen's swizzled scale layout (h3s::nvfp4_scale_offset).
__device__ __forceinline__ int64_t scale_offset(int64_t r, int64_t c, int64_t cols) {
  return ((r / 128) * (cols / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (c % 4);
}

__device__ __forceinline__ uint16_t weight(uint32_t code, float decode_scale) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(__fmul_rn(e2m1_to_f32(code), decode_scale)));
}

__global__ void __launch_bounds__(kThreads)
    decode_nvfp4_kernel(const uint8_t* codes, const uint8_t* scales, float global, uint16_t* w,
                        int64_t out, int64_t in, int64_t byte_cols, int64_t scale_cols) {
  const int64_t pairs = (in + 1) / 2;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= out * pairs) return;
  const int64_t n = i / pairs, k = (i % pairs) * 2;
  const uint32_t byte = codes[n * byte_cols + k / 2];
  // comfy-kitchen's order: the decode scale first, then value * it.
  const float s =
      __fmul_rn(e4m3_to_f32(scales[scale_offset(n, k / kBlockCols, scale_cols)]), global);
  w[n * in + k] = weight(byte >> 4, s);  // even column: the high nibble
  if (k + 1 < in) w[n * in + k + 1] = weight(byte & 0xfu, s);
}

int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

}  // namespace

void decode_nvfp4(const uint8_t* codes, const uint8_t* scales, float global, uint16_t* w,
                  int64_t out, int64_t in, cudaStream_t s) {
  if (out == 0 || in == 0) return;
  if (out < 0 || in < 0) fail_internal("decode_nvfp4: negative shape");
  const int64_t kp = round_up(in, kBlockCols);
  const int64_t threads = out * ((in + 1) / 2);
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (blocks > 0x7fffffff) fail_internal("decode_nvfp4: weight too large for one launch");
  decode_nvfp4_kernel<<<unsigned(blocks), kThreads, 0, s>>>(codes, scales, global, w, out, in,
                                                            kp / 2, round_up(kp / kBlockCols, 4));
  check_launch("decode_nvfp4");
}

}  // namespace h3s::cuda
