// CPU micro-benchmarks of the hot ops (Google Benchmark). Shapes are the tiny
// preset's (hidden 512, 4 heads x 128, ffn 1024) unless a benchmark says so.
//   build/bench/h3s_bench_cpu --benchmark_filter=Linear
#include <benchmark/benchmark.h>

#include <vector>

#include "backend/backend.hpp"
#include "core/rng.hpp"
#include "model/convrot.hpp"
#include "model/quant_linear.hpp"

namespace h3s {
namespace {

std::vector<uint16_t> random_bf16(int64_t n, uint64_t seed, float scale = 1.0f) {
  Rng r(seed);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& x : v) x = f32_to_bf16(scale * r.normal()).bits;
  return v;
}

Tensor bf16_tensor(std::vector<uint16_t>& v, int64_t rows, int64_t cols) {
  return Tensor::contiguous(v.data(), DType::bf16, {rows, cols});
}

void Linear(benchmark::State& state, WeightFormat f) {
  const int64_t m = state.range(0), k = 512, n = 1536;
  const QuantLinear w = QuantLinear::from_bf16(random_bf16(n * k, 1, 0.05f), n, k, f);
  std::vector<uint16_t> x = random_bf16(m * k, 2), y(static_cast<size_t>(m * n));
  auto be = make_cpu_backend(0);
  for (auto _ : state) be->linear(bf16_tensor(x, m, k), w, bf16_tensor(y, m, n));
  state.counters["GFLOP/s"] =
      benchmark::Counter(double(2 * m * n * k), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}
BENCHMARK_CAPTURE(Linear, bf16, WeightFormat::bf16)->Arg(1)->Arg(64)->Arg(512)->UseRealTime();
BENCHMARK_CAPTURE(Linear, int8, WeightFormat::int8)->Arg(1)->Arg(64)->Arg(512)->UseRealTime();
BENCHMARK_CAPTURE(Linear, w4a8, WeightFormat::w4a8)->Arg(64)->Arg(512)->UseRealTime();

void Attention(benchmark::State& state) {
  const int64_t s = state.range(0), heads = 4, hd = 128, inner = heads * hd;
  std::vector<uint16_t> q = random_bf16(s * inner, 3), k = random_bf16(s * inner, 4),
                        v = random_bf16(s * inner, 5), out(static_cast<size_t>(s * inner));
  HostMemory mem;
  Arena arena(mem, 0);
  auto be = make_cpu_backend(0);
  auto view3 = [&](std::vector<uint16_t>& d) {
    return Tensor::contiguous(d.data(), DType::bf16, {s, heads, hd});
  };
  const KvView kv{view3(k), view3(v)};
  for (auto _ : state) {
    AttnState st = AttnState::allocate(arena, s, heads, hd);
    be->attn_state_reset(st);
    be->attention(bf16_tensor(q, s, inner), kv, {0, s}, st);
    be->attn_state_finish(st, bf16_tensor(out, s, inner));
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(double(4 * s * s * inner), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
}
BENCHMARK(Attention)->Arg(256)->Arg(1024)->UseRealTime();

void RmsNormMod(benchmark::State& state) {
  const int64_t m = state.range(0), h = 512;
  std::vector<uint16_t> x = random_bf16(m * h, 6), out(static_cast<size_t>(m * h)),
                        g = random_bf16(h, 7), sh = random_bf16(3 * h, 8, 0.1f),
                        sc = random_bf16(3 * h, 9, 0.1f);
  const ModTable mod{bf16_tensor(sh, 3, h), bf16_tensor(sc, 3, h)};
  const ModRun run{0, m, 1};
  auto be = make_cpu_backend(0);
  for (auto _ : state)
    be->rms_norm_mod(bf16_tensor(x, m, h), Tensor::contiguous(g.data(), DType::bf16, {h}), 1e-5f,
                     &mod, {&run, 1}, bf16_tensor(out, m, h));
  state.SetItemsProcessed(state.iterations() * m);
}
BENCHMARK(RmsNormMod)->Arg(1024)->UseRealTime();

void QkNormRope(benchmark::State& state) {
  const int64_t m = state.range(0), cols = 512;
  std::vector<uint16_t> t = random_bf16(m * cols, 10), w = random_bf16(128, 11),
                        rope = random_bf16(m * 96, 12);
  auto be = make_cpu_backend(0);
  for (auto _ : state)
    be->qk_norm_rope(bf16_tensor(t, m, cols), Tensor::contiguous(w.data(), DType::bf16, {128}),
                     Tensor::contiguous(rope.data(), DType::bf16, {m, 48, 2}), 1e-5f, 96);
  state.SetItemsProcessed(state.iterations() * m);
}
BENCHMARK(QkNormRope)->Arg(1024)->UseRealTime();

void ConvRotQuantRow(benchmark::State& state) {
  const int64_t k = state.range(0);
  Rng r(13);
  std::vector<float> x(static_cast<size_t>(k));
  for (float& v : x) v = r.normal();
  std::vector<int8_t> q(static_cast<size_t>(k));
  float s = 0;
  for (auto _ : state) {
    quantize_row_convrot(x.data(), k, q.data(), &s);
    benchmark::DoNotOptimize(s);
  }
  state.SetItemsProcessed(state.iterations() * k);
}
BENCHMARK(ConvRotQuantRow)->Arg(5376)->Arg(14336);

}  // namespace
}  // namespace h3s
