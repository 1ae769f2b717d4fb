// Per-head q/k RMSNorm + split-half RoPE, bit-exact with comfy-kitchen's fused
// rms_rope kernel (docs/H3_MODEL.md 3.5, golden ck_rms_rope).
#include <cmath>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/qk_norm_rope_row.hpp"
#include "backend/op_checks.hpp"

namespace h3s::cpu {

void rms_rope_head(const uint16_t* in, uint16_t* out, const uint16_t* w, const uint16_t* rope,
                   float eps, int64_t rot_dim) {
  constexpr int kHead = 128, kLanes = 32;
  float x[kHead];
  // The kernel is built with fast math: bf16 subnormal inputs flush to zero.
  for (int d = 0; d < kHead; ++d) x[d] = flush_subnormal(bf16_to_f32(bf16{in[d]}));
  // Warp-shaped sum of squares: lane l fma-accumulates l, l+32, l+64, l+96,
  // then a butterfly over 16, 8, 4, 2, 1 lanes.
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    float s = 0.0f;
    for (int j = l; j < kHead; j += kLanes) s = std::fma(x[j], x[j], s);
    lane[l] = s;
  }
  for (int off = kLanes / 2; off >= 1; off /= 2)
    for (int l = 0; l < off; ++l) lane[l] = lane[l] + lane[l + off];
  const float rr = 1.0f / std::sqrt(lane[0] / float(kHead) + eps);
  float n[kHead];
  for (int d = 0; d < kHead; ++d) n[d] = round_bf16((x[d] * rr) * bf16_to_f32(bf16{w[d]}));
  const int64_t half = rot_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float c = bf16_to_f32(bf16{rope[2 * i]}), s = bf16_to_f32(bf16{rope[2 * i + 1]});
    const float a = n[i], b = n[i + half];
    // bf16 x bf16 products are exact in fp32, so fma or not gives these bits.
    out[i] = f32_to_bf16(c * a - s * b).bits;
    out[i + half] = f32_to_bf16(s * a + c * b).bits;
  }
  for (int64_t d = rot_dim; d < kHead; ++d) out[d] = f32_to_bf16(n[d]).bits;
}

void CpuBackend::qk_norm_rope(const Tensor& t, const Tensor& w, const Tensor& rope, float eps,
                              int64_t rot_dim) {
  checks::qk_norm_rope_args(t, w, rope, rot_dim, Device::host);
  constexpr int64_t kHead = 128;
  const int64_t heads = t.cols() / kHead;
  pool_.parallel_for(t.rows(), 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      uint16_t* row = t.row<uint16_t>(r);
      const uint16_t* rp = rot_dim > 0 ? rope.row<uint16_t>(r) : nullptr;
      for (int64_t h = 0; h < heads; ++h)
        rms_rope_head(row + h * kHead, row + h * kHead, w.ptr<uint16_t>(), rp, eps, rot_dim);
    }
  });
}

}  // namespace h3s::cpu
