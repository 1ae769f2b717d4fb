// SageAttention-2's Hopper kernel (thu-ml/SageAttention, csrc/qattn/qk_int_sv_f8_cuda_sm90.cu,
// the kernel that sageattn() runs on sm90: per-thread int8 Q/K, fp8 V with the per-channel
// scale fused, "fp32+fp32" two-level accumulation) timed at H3's shape, with its launcher's
// settings (CTA_Q 64, CTA_K 128, 128 threads). A comparison harness, not part of h3stream:
// the kernel source is fetched, never committed. Inputs: gaussian codes generated on the GPU.
// A small case is checked against a host reference on the same codes first.
// --inputs sagebench reproduces SageAttention's own benchmark
// (bench/bench_qk_int8_pv_fp8_cuda_sm90.py): codes uniform in [-95, 95), Q/K/V scales N(0, 1)
// (random signs), V = e4m3(N(0, 1)).
//   usage: sage2_bench TOKENS [HEADS=56] [REPS=3] [gaussian|sagebench]
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "csrc/qattn/sm90_kernel_only.cuh"  // extracted by bench/sage2/build.sh

#define CK(x)                                                                                \
  do {                                                                                       \
    cudaError_t e = (x);                                                                     \
    if (e != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

constexpr int kD = 128, kCtaQ = 64, kCtaK = 128, kThreads = 128;
constexpr float kQkRange = 3.0f;  // ~max |x| of a per-thread group of N(0,1) values
constexpr float kVRange = 5.0f;   // ~max |v| of a channel over the sequence

__host__ __device__ inline uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
__host__ __device__ inline float gauss(uint64_t key) {
  const uint64_t r = splitmix(key);
  const float u1 = (float((r >> 40) & 0xffffff) + 0.5f) * (1.0f / 16777216.0f);
  const float u2 = float((r >> 16) & 0xffffff) * (1.0f / 16777216.0f);
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}
__host__ __device__ inline int8_t qk_code(uint64_t key) {
  float c = rintf(gauss(key) * (127.0f / kQkRange));
  return int8_t(fminf(fmaxf(c, -127.0f), 127.0f));
}
__host__ __device__ inline float v_value(uint64_t key) {  // v / scale, in e4m3's range
  return fminf(fmaxf(gauss(key) * (448.0f / kVRange), -448.0f), 448.0f);
}
// V^T's column c of a 16-key group holds key kPerm[c % 16] (SageAttention's per_channel_fp8).
__host__ __device__ inline int v_token(int64_t col) {
  const int perm[16] = {0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15};
  return int((col & ~int64_t(15)) + perm[col & 15]);
}

__host__ __device__ inline int8_t uniform_code(uint64_t key) {  // torch.randint(-95, 95)
  return int8_t(int(splitmix(key) % 190) - 95);
}
__global__ void fill_qk(int8_t* q, int8_t* k, int64_t n, uint64_t seed, bool sagebench) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t kq = seed * 3 + 0x1000000000ull + uint64_t(i),
                   kk = seed * 3 + 0x8000000000ull + uint64_t(i);
    q[i] = sagebench ? uniform_code(kq) : qk_code(kq);
    k[i] = sagebench ? uniform_code(kk) : qk_code(kk);
  }
}
// v^T [heads, 128, padded]: (h, d, col) holds token v_token(col) of channel d.
__global__ void fill_v(__nv_fp8_e4m3* v, int heads, int64_t tokens, int64_t padded, uint64_t seed,
                       bool sagebench) {
  const int64_t n = int64_t(heads) * kD * padded;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t col = i % padded, hd = i / padded, d = hd % kD, h = hd / kD;
    const int64_t t = v_token(col);
    const uint64_t key = seed * 5 + 0x20000000000ull + uint64_t((h * tokens + t) * kD + d);
    const float x = t < tokens ? (sagebench ? gauss(key) : v_value(key)) : 0.0f;
    v[i] = __nv_fp8_e4m3(x);
  }
}
__global__ void fill_f32(float* p, int64_t n, float x, uint64_t seed, bool sagebench) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = sagebench ? gauss(seed + uint64_t(i)) : x;
}

using Kernel =
    decltype(&qk_int8_sv_f8_attn_kernel<kCtaQ, kCtaK, kThreads, kD, QuantGranularity::kPerThread,
                                        QuantGranularity::kPerThread, nv_bfloat16, MaskMode::kNone,
                                        false, true>);

struct Problem {
  int heads;
  int64_t tokens, padded;
  int8_t *q, *k;
  __nv_fp8_e4m3* v;
  float *qs, *ks, *vs;
  nv_bfloat16* o;
  CUtensorMap mq, mk, mv;
  dim3 grid;
  size_t smem;
  float sm_scale;
};

Problem make(int heads, int64_t tokens, uint64_t seed, bool sagebench = false) {
  Problem p{};
  p.heads = heads;
  p.tokens = tokens;
  p.padded = (tokens + kCtaK - 1) / kCtaK * kCtaK;
  const int64_t qk = int64_t(heads) * tokens * kD;
  CK(cudaMalloc(&p.q, qk));
  CK(cudaMalloc(&p.k, qk));
  CK(cudaMalloc(&p.v, int64_t(heads) * kD * p.padded));
  CK(cudaMalloc(&p.o, qk * 2));
  const int64_t qs_n = int64_t(heads) * ((tokens + kCtaQ - 1) / kCtaQ) * (kThreads / 32) * 8;
  const int64_t ks_n = int64_t(heads) * ((tokens + kCtaK - 1) / kCtaK) * 4;
  CK(cudaMalloc(&p.qs, qs_n * 4));
  CK(cudaMalloc(&p.ks, ks_n * 4));
  CK(cudaMalloc(&p.vs, int64_t(heads) * kD * 4));
  fill_qk<<<2048, 256>>>(p.q, p.k, qk, seed, sagebench);
  fill_v<<<2048, 256>>>(p.v, heads, tokens, p.padded, seed, sagebench);
  fill_f32<<<256, 256>>>(p.qs, qs_n, kQkRange / 127.0f, 0x300000000000ull, sagebench);
  fill_f32<<<256, 256>>>(p.ks, ks_n, kQkRange / 127.0f, 0x400000000000ull, sagebench);
  fill_f32<<<64, 256>>>(p.vs, int64_t(heads) * kD, kVRange / 448.0f, 0x500000000000ull, sagebench);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  // HND, batch 1: the launcher's strides for tensor_layout 1.
  const int stride_h = int(tokens * kD), stride_bz = heads * stride_h;
  p.mq = create_tensor_map_4D<kCtaQ, kD>(p.q, 1, heads, int(tokens), kD, stride_bz, stride_h, kD);
  p.mk = create_tensor_map_4D<kCtaK, kD>(p.k, 1, heads, int(tokens), kD, stride_bz, stride_h, kD);
  p.mv = create_tensor_map_4D<kD, kCtaK>(reinterpret_cast<int8_t*>(p.v), 1, heads, kD,
                                         int(p.padded), int(heads * kD * p.padded),
                                         int(kD * p.padded), int(p.padded));
  p.grid = dim3(unsigned((tokens + kCtaQ - 1) / kCtaQ), unsigned(heads), 1);
  p.smem = size_t(kCtaQ + 2 * kCtaK) * kD;
  p.sm_scale = 1.0f / std::sqrt(float(kD));
  return p;
}

void launch(const Problem& p, Kernel kernel) {
  const uint32_t stride_h = uint32_t(p.tokens * kD);
  kernel<<<p.grid, kThreads, p.smem>>>(p.mq, p.mk, p.mv, p.qs, p.ks, p.vs, p.o, nullptr,
                                       uint32_t(p.heads) * stride_h, stride_h, kD,
                                       uint32_t(p.tokens), uint32_t(p.tokens), 1, p.sm_scale);
}

void release(Problem& p) {
  cudaFree(p.q);
  cudaFree(p.k);
  cudaFree(p.v);
  cudaFree(p.o);
  cudaFree(p.qs);
  cudaFree(p.ks);
  cudaFree(p.vs);
}

// The host reference on the same codes: fp32 softmax, fp32 P (SageAttention's P is e4m3, so
// the kernel differs by P's rounding: a few 1e-2 rel-rms at most).
bool check(Kernel kernel) {
  const int heads = 2;
  const int64_t tokens = 1000;  // not a multiple of 128: the tail tile's mask
  Problem p = make(heads, tokens, 7);
  launch(p, kernel);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<int8_t> q(heads * tokens * kD), k(q.size());
  std::vector<__nv_fp8_e4m3> v(size_t(heads) * kD * p.padded);
  std::vector<nv_bfloat16> o(q.size());
  CK(cudaMemcpy(q.data(), p.q, q.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(k.data(), p.k, k.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(v.data(), p.v, v.size(), cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(o.data(), p.o, o.size() * 2, cudaMemcpyDeviceToHost));
  double err = 0, ref2 = 0;
  const float sc = (kQkRange / 127.0f) * (kQkRange / 127.0f) * p.sm_scale, vsc = kVRange / 448.0f;
  std::vector<double> s(tokens), vt(size_t(tokens) * kD);
  for (int h = 0; h < heads; ++h) {
    for (int64_t col = 0; col < p.padded; ++col) {
      const int64_t t = v_token(col);
      if (t < tokens)
        for (int d = 0; d < kD; ++d)
          vt[t * kD + d] = float(v[(size_t(h) * kD + d) * p.padded + col]) * vsc;
    }
    for (int64_t i = 0; i < tokens; i += 7) {
      double mx = -1e30;
      for (int64_t j = 0; j < tokens; ++j) {
        int32_t dot = 0;
        for (int d = 0; d < kD; ++d)
          dot += int32_t(q[(h * tokens + i) * kD + d]) * k[(h * tokens + j) * kD + d];
        s[j] = dot * double(sc);
        mx = std::max(mx, s[j]);
      }
      double l = 0;
      for (int64_t j = 0; j < tokens; ++j) l += (s[j] = std::exp(s[j] - mx));
      for (int d = 0; d < kD; ++d) {
        double r = 0;
        for (int64_t j = 0; j < tokens; ++j) r += s[j] * vt[j * kD + d];
        r /= l;
        const double g = float(o[(h * tokens + i) * kD + d]);
        err += (g - r) * (g - r);
        ref2 += r * r;
      }
    }
  }
  release(p);
  const double rel = std::sqrt(err / ref2);
  std::printf(
      "{\"check\": \"sage2 vs host reference on the same codes\", \"tokens\": %lld, \"rel_rms\": "
      "%.4g, \"ok\": %s}\n",
      (long long)tokens, rel, rel < 0.05 ? "true" : "false");
  return rel < 0.05;
}

int main(int argc, char** argv) {
  const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 217088;
  const int heads = argc > 2 ? std::atoi(argv[2]) : 56;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  const std::string inputs = argc > 4 ? argv[4] : "gaussian";
  if (inputs != "gaussian" && inputs != "sagebench") {
    std::fprintf(stderr, "inputs must be gaussian or sagebench, not %s\n", inputs.c_str());
    return 2;
  }
  Kernel kernel =
      &qk_int8_sv_f8_attn_kernel<kCtaQ, kCtaK, kThreads, kD, QuantGranularity::kPerThread,
                                 QuantGranularity::kPerThread, nv_bfloat16, MaskMode::kNone, false,
                                 true>;
  CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                          int(size_t(kCtaQ + 2 * kCtaK) * kD)));
  if (!check(kernel)) return 3;
  Problem p = make(heads, tokens, 1, inputs == "sagebench");
  launch(p, kernel);  // warm-up
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int r = 0; r < reps; ++r) {
    cudaEventRecord(a);
    launch(p, kernel);
    cudaEventRecord(b);
    CK(cudaEventSynchronize(b));
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    const double ops = 4.0 * double(tokens) * double(tokens) * kD * heads;
    std::printf(
        "{\"kernel\": \"sageattn2_sm90 (qk_int8_sv_f8_accum_f32_fuse_v_scale_attn_inst_buf, "
        "per_thread)\", "
        "\"inputs\": \"%s\", \"tokens\": %lld, \"heads\": %d, \"rep\": %d, \"ms\": %.3f, \"tops\": "
        "%.1f}\n",
        inputs.c_str(), (long long)tokens, heads, r, ms, ops / (ms * 1e-3) / 1e12);
    std::fflush(stdout);
  }
  release(p);
  return 0;
}
