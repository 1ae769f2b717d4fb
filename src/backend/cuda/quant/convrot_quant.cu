// The int8 ConvRot activation quantiser on the GPU, bit-exact per row with
// h3s::quantize_row_convrot (model/convrot.cpp), optionally fed by SwiGLU.
//
// One CTA per row, so a row's result cannot depend on the rows beside it.
// Pass 1: each half-warp rotates one 256-wide group at a time with the
// reference's four radix-4 stages, every output the same left-to-right fp32
// expression. A lane first holds 16 consecutive values (index bits 0-3: the
// stride-1 and stride-4 digits) and runs those two stages in registers; one
// transpose through shared memory gives it the 16 values of index bits 4-7
// (the stride-16 and stride-64 digits) for the last two. The lane then folds
// its values into the row's absmax (unrounded, NaN ignored) and stores bf16(r)
// in a row buffer. Pass 2: scale from the absmax, then q from the buffer.
// The only reduction is a max, which is exact in any order, so thread and
// warp counts never show in the bits.
#include <cuda_runtime.h>

#include <bit>
#include <cstdint>
#include <string>

#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"

namespace h3s::cuda {
namespace {

// ---- traits ------------------------------------------------------------------
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kGroup = 256;  // ConvRot group (model/convrot.hpp kConvRotGroup)
constexpr int kLanesPerGroup = 16;
constexpr int kPerLane = kGroup / kLanesPerGroup;  // 16 values of a group per lane
constexpr int kGroupsPerCta = kThreads / kLanesPerGroup;
// Transpose tile: one float per group element plus one pad word every 16, so
// both the row-wise writes and the column-wise reads hit 32 distinct banks
// (address i + i / 16: lane l writes 17 l + j, reads l + 17 j; the second
// half-warp's tile starts 272 words = 16 banks further on).
constexpr int kTileWords = kGroup + kGroup / 16;
constexpr int kWorkspaceBytes = kGroupsPerCta * kTileWords * int(sizeof(float));
static_assert(kWorkspaceBytes % 16 == 0, "the row buffer after the tiles must be 16-byte aligned");
constexpr int kOutPack = 8;  // q values per thread and step (one 8-byte store)

// The reference's constants (convrot.cpp quantize_rotated_row).
constexpr float kBf16Max = 3.38953139e38f;
constexpr float kInv127 = 1.0f / 127.0f;
static_assert(std::bit_cast<uint32_t>(kInv127) == 0x3c010204u, "fp32(1/127)");
static_assert(std::bit_cast<uint32_t>(kBf16Max) == 0x7f7f0000u, "largest finite bf16");

// ---- activation input --------------------------------------------------------

// The raw bf16 inputs of a lane's 16 values: gate (or x) and, for SwiGLU, up.
struct Raw {
  uint4 g[2], u[2];
};

template <ActInput kMode>
__device__ __forceinline__ void load_raw(const uint16_t* xr, int64_t k, int64_t c, bool vec,
                                         Raw& r) {
  constexpr bool kUp = kMode != ActInput::bf16;
  if (vec) {
    r.g[0] = *reinterpret_cast<const uint4*>(xr + c);
    r.g[1] = *reinterpret_cast<const uint4*>(xr + c + 8);
    if constexpr (kUp) {
      r.u[0] = *reinterpret_cast<const uint4*>(xr + k + c);
      r.u[1] = *reinterpret_cast<const uint4*>(xr + k + c + 8);
    }
  } else {
    uint16_t* g = reinterpret_cast<uint16_t*>(r.g);
    uint16_t* u = reinterpret_cast<uint16_t*>(r.u);
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      g[j] = xr[c + j];
      if constexpr (kUp) u[j] = xr[k + c + j];
    }
  }
}

// The activation values as the CPU's loaders produce them (linear.cpp):
// bf16 -> fp32; fused SwiGLU silu(g) * u in fp32 (cpu::swiglu_f32); eager
// SwiGLU bf16(bf16(silu(g)) * u) (cpu::swiglu_bf16).
template <ActInput kMode>
__device__ __forceinline__ void to_act(const Raw& r, float a[kPerLane]) {
  const uint16_t* g = reinterpret_cast<const uint16_t*>(r.g);
  const uint16_t* u = reinterpret_cast<const uint16_t*>(r.u);
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const float gf = bf16_to_f32(g[j]);
    if constexpr (kMode == ActInput::bf16) {
      a[j] = gf;
    } else if constexpr (kMode == ActInput::swiglu_f32) {
      a[j] = __fmul_rn(silu_f32(gf), bf16_to_f32(u[j]));
    } else {
      a[j] = round_bf16(__fmul_rn(round_bf16(silu_f32(gf)), bf16_to_f32(u[j])));
    }
  }
}

// ---- rotation ----------------------------------------------------------------

// One radix-4 butterfly of h3s::convrot_rotate_group, its four outputs as the
// reference spells them (left to right, times 0.5).
__device__ __forceinline__ void radix4(float& x0, float& x1, float& x2, float& x3) {
  const float a = x0, b = x1, c = x2, d = x3;
  const float s01 = __fadd_rn(a, b);
  x0 = __fmul_rn(0.5f, __fsub_rn(__fadd_rn(s01, c), d));
  x1 = __fmul_rn(0.5f, __fadd_rn(__fsub_rn(s01, c), d));
  x2 = __fmul_rn(0.5f, __fadd_rn(__fadd_rn(__fsub_rn(a, b), c), d));
  x3 = __fmul_rn(0.5f, __fadd_rn(__fadd_rn(__fsub_rn(b, a), c), d));
}

// Two stages on 16 values whose index bits 0-3 are the two digits: first the
// lower digit (v[4q .. 4q+3]), then the upper (v[q], v[q+4], v[q+8], v[q+12]).
// Within a stage the butterflies are disjoint, so their order is immaterial.
__device__ __forceinline__ void two_stages(float v[kPerLane]) {
#pragma unroll
  for (int q = 0; q < 4; ++q) radix4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
#pragma unroll
  for (int q = 0; q < 4; ++q) radix4(v[q], v[q + 4], v[q + 8], v[q + 12]);
}

// NaN-ignoring max, like the reference's `if (a > absmax) absmax = a`.
__device__ __forceinline__ float max_ignoring_nan(float m, float a) {
  return a > m ? a : m;
}

// q = clamp(rne(bf16(bf16(r) / bf16(scale))), -128, 127), NaN -> -128
// (cvt.rni of NaN gives INT_MIN, clamped).
__device__ __forceinline__ int8_t quantize_value(uint16_t r_bf16, float scale_bf16) {
  const float d = bf16_to_f32(f32_to_bf16_arith(__fdiv_rn(bf16_to_f32(r_bf16), scale_bf16)));
  if (isnan(d)) return int8_t(-128);
  return int8_t(int(rintf(fmaxf(fminf(d, 127.0f), -128.0f))));
}

// ---- kernel ------------------------------------------------------------------

template <ActInput kMode>
__global__ void __launch_bounds__(kThreads)
    quantize_convrot_kernel(const uint16_t* __restrict__ x, int64_t ldx, int8_t* __restrict__ q,
                            int64_t ldq, float* __restrict__ scale, int64_t k, bool vec_in,
                            bool vec_out) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float warp_max[kWarps];
  __shared__ float row_scale_bf16;
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int slot = int(threadIdx.x) / kLanesPerGroup;  // this half-warp's group slot
  const int l = int(threadIdx.x) % kLanesPerGroup;
  float* tile = reinterpret_cast<float*>(smem) + slot * kTileWords;
  uint16_t* rowbuf = reinterpret_cast<uint16_t*>(smem + kWorkspaceBytes);
  const int64_t row = blockIdx.x;
  const uint16_t* xr = x + row * ldx;

  // Pass 1. Half-warp `slot` takes groups slot, slot + 8, ...; both halves of
  // a warp run the same number of iterations (an idle half computes on zeros
  // and discards them) so the warp-wide __syncwarp calls always match.
  const int64_t groups = k / kGroup;
  constexpr int64_t kStepGroups = kGroupsPerCta;
  const int64_t first_pair = int64_t(warp) * 2;  // groups first_pair, first_pair + 1
  float absmax = 0.0f;
  Raw next{};
  if (first_pair + (slot & 1) < groups)
    load_raw<kMode>(xr, k, (first_pair + (slot & 1)) * kGroup + l * kPerLane, vec_in, next);
  for (int64_t pair = first_pair; pair < groups; pair += kStepGroups) {
    const int64_t g = pair + (slot & 1);
    const bool active = g < groups;
    Raw cur = next;
    if (g + kStepGroups < groups)
      load_raw<kMode>(xr, k, (g + kStepGroups) * kGroup + l * kPerLane, vec_in, next);
    float v[kPerLane];
    to_act<kMode>(cur, v);  // v[j]: element 16 l + j
    two_stages(v);          // strides 1 and 4
    __syncwarp();           // the previous group's tile reads are done
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) tile[17 * l + j] = v[j];  // i = 16 l + j
    __syncwarp();
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) v[j] = tile[l + 17 * j];  // now element l + 16 j
    two_stages(v);                                               // strides 16 and 64
    if (active) {  // (a NaN r need only stay a NaN: it quantises to -128)
      uint16_t* rb = rowbuf + g * kGroup + l;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        absmax = max_ignoring_nan(absmax, fabsf(v[j]));
        rb[16 * j] = f32_to_bf16_arith(v[j]);
      }
    }
  }
#pragma unroll
  for (int off = 16; off >= 1; off /= 2)
    absmax = max_ignoring_nan(absmax, __shfl_xor_sync(0xffffffffu, absmax, off));
  if (lane == 0) warp_max[warp] = absmax;
  __syncthreads();
  if (threadIdx.x == 0) {
    float m = warp_max[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) m = max_ignoring_nan(m, warp_max[w]);
    const float s = fmaxf(__fmul_rn(fminf(m, kBf16Max), kInv127), 1e-30f);
    scale[row] = s;
    row_scale_bf16 = bf16_to_f32(f32_to_bf16_arith(s));
  }
  __syncthreads();

  // Pass 2: q from the row buffer, 8 values (one 8-byte store) per step.
  const float sb = row_scale_bf16;
  int8_t* qr = q + row * ldq;
  for (int64_t c = int64_t(threadIdx.x) * kOutPack; c < k; c += int64_t(kThreads) * kOutPack) {
    const uint4 packed = *reinterpret_cast<const uint4*>(rowbuf + c);
    const uint16_t* rb = reinterpret_cast<const uint16_t*>(&packed);
    int8_t out[kOutPack];
#pragma unroll
    for (int j = 0; j < kOutPack; ++j) out[j] = quantize_value(rb[j], sb);
    if (vec_out) {
      *reinterpret_cast<uint2*>(qr + c) = *reinterpret_cast<const uint2*>(out);
    } else {
#pragma unroll
      for (int j = 0; j < kOutPack; ++j) qr[c + j] = out[j];
    }
  }
}

template <ActInput kMode>
void launch(const uint16_t* x, int64_t ldx, int8_t* q, int64_t ldq, float* scale, int64_t m,
            int64_t k, cudaStream_t s) {
  // The dynamic shared memory grows with k (the row buffer): a run-time value,
  // bounded here by what a block may take on this GPU. The model's rows (k at
  // most its FFN width, 14,336: 37,376 bytes) fit the 48 KiB every GPU gives.
  const size_t smem = size_t(kWorkspaceBytes) + size_t(k) * sizeof(uint16_t);
  constexpr size_t kDefaultSmem = 48 * 1024;
  if (smem > kDefaultSmem) {
    // k > 20,224: opt in to the large carve-out, up to the device's per-block
    // maximum less the kernel's static shared memory: 99 KiB on sm_86/89/120
    // (arch::kSmemOptInSm86: k up to 46,080), 163 KiB on sm_80, 227 KiB on sm_90.
    cudaFuncAttributes attr{};
    cudaError_t e = cudaFuncGetAttributes(&attr, quantize_convrot_kernel<kMode>);
    if (e != cudaSuccess) fail_cuda("quantize_convrot: kernel attributes", e);
    const size_t limit = size_t(arch::max_dynamic_smem_bytes()) - attr.sharedSizeBytes;
    if (smem > limit)
      fail_internal(("quantize_convrot: a row of k = " + std::to_string(k) + " needs " +
                     std::to_string(smem) + " bytes of dynamic shared memory; a block may take " +
                     std::to_string(limit) + " on this GPU")
                        .c_str());
    e = cudaFuncSetAttribute(quantize_convrot_kernel<kMode>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess) fail_cuda("quantize_convrot: reserving shared memory", e);
  }
  const bool vec_in = aligned_to(x, 16) && ldx % 8 == 0;  // k % 256 == 0 keeps `up` aligned
  const bool vec_out = aligned_to(q, 8) && ldq % 8 == 0;
  quantize_convrot_kernel<kMode>
      <<<unsigned(m), kThreads, smem, s>>>(x, ldx, q, ldq, scale, k, vec_in, vec_out);
  check_launch("quantize_convrot");
}

}  // namespace

void quantize_convrot(const uint16_t* x, int64_t ldx, ActInput input, int8_t* q, int64_t ldq,
                      float* scale, int64_t m, int64_t k, cudaStream_t s) {
  if (m == 0) return;
  if (k <= 0 || k % kGroup != 0)
    fail_internal("quantize_convrot: k must be a positive multiple of 256");
  if (m > 0x7fffffff) fail_internal("quantize_convrot: more than 2^31 - 1 rows in one call");
  switch (input) {
    case ActInput::bf16:
      return launch<ActInput::bf16>(x, ldx, q, ldq, scale, m, k, s);
    case ActInput::swiglu_f32:
      return launch<ActInput::swiglu_f32>(x, ldx, q, ldq, scale, m, k, s);
    case ActInput::swiglu_bf16:
      return launch<ActInput::swiglu_bf16>(x, ldx, q, ldq, scale, m, k, s);
  }
}

}  // namespace h3s::cuda
