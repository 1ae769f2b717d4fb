// RMSNorm (+ per-segment adaLN modulation), one row at a time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "core/dot_f32.hpp"

namespace h3s::cpu {

void CpuBackend::rms_norm_mod(const Tensor& x, const Tensor& gamma, float eps, const ModTable* mod,
                              std::span<const ModRun> runs, const Tensor& out) {
  checks::rms_norm_mod_args(x, gamma, mod, runs, out, Device::host);
  const int64_t rows = x.rows(), h = x.cols();
  // Row -> mod row (or -1: no modulation).
  std::vector<int32_t> row_mod(static_cast<size_t>(rows), -1);
  if (mod)
    for (const ModRun& r : runs)
      for (int64_t i = r.begin; i < r.end; ++i) row_mod[size_t(i)] = r.mod_row;
  const uint16_t* g = gamma.ptr<uint16_t>();
  pool_.parallel_for(rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> v(static_cast<size_t>(h));
    for (int64_t r = r0; r < r1; ++r) {
      const uint16_t* xr = x.row<uint16_t>(r);
      for (int64_t c = 0; c < h; ++c) v[size_t(c)] = bf16_to_f32(bf16{xr[c]});
      const float ss = dot_f32(v.data(), v.data(), h);
      const float rstd = 1.0f / std::sqrt(ss / float(h) + eps);
      uint16_t* o = out.row<uint16_t>(r);
      const int32_t m = row_mod[size_t(r)];
      const uint16_t* sh = m >= 0 ? mod->shift.row<uint16_t>(m) : nullptr;
      const uint16_t* sc = m >= 0 ? mod->scale.row<uint16_t>(m) : nullptr;
      for (int64_t c = 0; c < h; ++c) {
        float y = round_bf16((v[size_t(c)] * rstd) * bf16_to_f32(bf16{g[c]}));
        if (m >= 0) {
          const float one_plus = round_bf16(1.0f + bf16_to_f32(bf16{sc[c]}));
          y = round_bf16(round_bf16(y * one_plus) + bf16_to_f32(bf16{sh[c]}));
        }
        o[c] = f32_to_bf16(y).bits;
      }
    }
  });
}

}  // namespace h3s::cpu
