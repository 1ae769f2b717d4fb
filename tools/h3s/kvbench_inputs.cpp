// `h3s kvbench`'s gaussian and outlier inputs (kvbench_inputs.hpp).
#include "kvbench_inputs.hpp"

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/rng.hpp"

namespace h3s::cli::kvbench {

// Rows are generated in blocks of kRowsPerSeed tokens, each from its own
// seeded stream, on the thread pool (217k tokens x 56 heads is 1.6 G values
// per tensor): the same inputs whatever the thread count.
Inputs make_inputs(const std::string& kind, int64_t n, int64_t heads, uint64_t seed,
                   ThreadPool& pool) {
  constexpr int64_t kRowsPerSeed = 256;
  const int64_t inner = heads * kHd;
  const bool outlier = kind == "outlier";
  if (!outlier && kind != "gaussian")
    fail(ErrorKind::invalid_argument, "kvbench: unknown input '{}' (gaussian, outlier)", kind);
  std::vector<float> offset(static_cast<size_t>(inner));
  Rng head_rng(seed);
  for (float& x : offset) x = 2.0f * head_rng.normal();  // N(0, 4)
  Inputs in;
  in.tokens = n;
  in.heads = heads;
  for (Rows* t : {&in.q, &in.k, &in.v}) t->resize(size_t(n * inner));
  const int64_t blocks = (n + kRowsPerSeed - 1) / kRowsPerSeed;
  pool.parallel_for(blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      Rng r(seed * 0x9e3779b97f4a7c15ull + uint64_t(b) + 1);
      for (int64_t t = b * kRowsPerSeed; t < std::min(n, (b + 1) * kRowsPerSeed); ++t) {
        const float row_scale = outlier ? 0.5f + 1.5f * r.uniform() : 1.0f;
        for (int64_t c = 0; c < inner; ++c) {
          const int64_t d = c % kHd;
          const size_t i = size_t(t * inner + c);
          float q = r.normal(), k = r.normal(), v = r.normal();
          if (outlier) {
            if (d == 3 || d == 17 || d == 64 || d == 100) k *= 20.0f;
            k += offset[size_t(c)];
            if (d == 5 || d == 77) v *= 10.0f;
            q *= row_scale;
          }
          in.q[i] = f32_to_bf16(q).bits;
          in.k[i] = f32_to_bf16(k).bits;
          in.v[i] = f32_to_bf16(v).bits;
        }
      }
    }
  });
  return in;
}

}  // namespace h3s::cli::kvbench
