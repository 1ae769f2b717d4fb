// self_check can say no: its verdict compares bits (-0 vs +0 and NaN payloads
// count), and a deliberately diverging streamed path (PerturbingBackend) is
// reported per variant, in the block check and in the forward's log line.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "exec/forward.hpp"
#include "exec/self_check.hpp"
#include "exec_fixture.hpp"
#include "perturbing_backend.hpp"

namespace h3s::test {
namespace {

ExecOptions small_chunks() {
  return streamed_options(7, 11, 13, 128);
}

const SelfCheckResult::Variant& variant(const SelfCheckResult& r, const std::string& name) {
  for (const auto& v : r.variants)
    if (v.name == name) return v;
  throw std::runtime_error("no variant " + name);
}

TEST(SelfCheckBits, SignedZerosAndNanPayloadsDiverge) {
  const std::vector<uint16_t> ref = {0x0000, 0x7fc0, 0x3f80, 0xbf80};
  std::vector<uint16_t> got = ref;
  EXPECT_EQ(compare_bf16_bits("same", ref, got).differing, 0);
  got[0] = 0x8000;  // -0 for +0: 0 ulp apart, but not the same bits
  SelfCheckResult::Variant v = compare_bf16_bits("zero", ref, got);
  EXPECT_EQ(v.differing, 1);
  EXPECT_EQ(v.max_ulp, 0);
  got = ref;
  got[1] = 0x7fc1;  // another NaN payload
  v = compare_bf16_bits("nan", ref, got);
  EXPECT_EQ(v.differing, 1);
  got = ref;
  got[3] = 0xbf82;
  v = compare_bf16_bits("ulps", ref, got);
  EXPECT_EQ(v.differing, 1);
  EXPECT_EQ(v.max_ulp, 2);
  EXPECT_DOUBLE_EQ(v.mean_ulp, 0.5);

  SelfCheckResult r;
  r.variants.push_back(compare_bf16_bits("full", ref, ref));
  EXPECT_TRUE(r.all_equal());
  got = ref;
  got[0] = 0x8000;
  r.variants.push_back(compare_bf16_bits("q_only", ref, got));
  EXPECT_FALSE(r.all_equal());
  const std::string line = r.line(4);
  EXPECT_NE(line.find("DIVERGED (q_only)"), std::string::npos) << line;
  EXPECT_EQ(line.find("bit-equal"), std::string::npos) << line;
}

TEST(SelfCheckUlps, DistanceIsMonotonicAcrossZero) {
  EXPECT_EQ(bf16_ulp_distance(0x3f80, 0x3f80), 0);
  EXPECT_EQ(bf16_ulp_distance(0x3f80, 0x3f81), 1);
  EXPECT_EQ(bf16_ulp_distance(0x0001, 0x8001), 2);  // +min subnormal vs -min subnormal
  EXPECT_EQ(bf16_ulp_distance(0x0000, 0x8000), 0);  // +0 and -0 (the bit verdict differs)
  EXPECT_EQ(bf16_ulp_distance(0x7fc0, 0x3f80), 0xffff);
}

// One flipped bit per streamed chunk: the variants that chunk the attention or
// the MLP phase (where the gated residual runs per chunk) diverge, the others
// are reported bit-equal, and the block's x is left as it was.
TEST(SelfCheckBlock, ReportsADivergingStreamedPath) {
  const ModelWeights& w = weights_for(WeightFormat::int8);
  BlockHarness h(w, small_layout(w.config, 10, 5, 90, true, true));
  const int64_t seq = h.layout.seq_len;
  auto perturbing = std::make_unique<PerturbingBackend>(seq);
  PerturbingBackend* pb = perturbing.get();
  h.be = std::move(perturbing);
  std::vector<uint16_t> x = h.random_x(3);
  const std::vector<uint16_t> x0 = x;
  const SelfCheckResult r = self_check_block(*h.be, h.arena, h.view(), h.tensor(x), small_chunks());
  EXPECT_GT(pb->perturbed(), 0);
  EXPECT_TRUE(bits_equal(x, x0)) << "self_check modified x";
  EXPECT_FALSE(r.all_equal());
  for (const char* name : {"full", "q_only", "mlp_only"}) {
    EXPECT_GT(variant(r, name).differing, 0) << name;
    EXPECT_GT(variant(r, name).max_ulp, 0) << name;
  }
  for (const char* name : {"kv_only", "none"}) EXPECT_EQ(variant(r, name).differing, 0) << name;
  const std::string line = r.line(seq);
  EXPECT_NE(line.find("DIVERGED (full, q_only, mlp_only)"), std::string::npos) << line;
}

TEST(SelfCheckBlock, HonestBackendIsBitEqualInEveryVariant) {
  const ModelWeights& w = weights_for(WeightFormat::int8);
  BlockHarness h(w, small_layout(w.config, 10, 5, 90, true, true));
  std::vector<uint16_t> x = h.random_x(3);
  const SelfCheckResult r = self_check_block(*h.be, h.arena, h.view(), h.tensor(x), small_chunks());
  ASSERT_EQ(r.variants.size(), 5u);
  for (const auto& v : r.variants) {
    EXPECT_EQ(v.differing, 0) << v.name;
    EXPECT_EQ(v.max_ulp, 0) << v.name;
  }
  EXPECT_TRUE(r.all_equal());
}

// With an approximate tier every variant runs that tier (and its exact rows),
// so the verdict is the tier's chunk invariance, and the line adds the tier's
// error against the exact store, labelled approximate.
TEST(SelfCheckBlock, ApproximateTierIsCheckedWithinTheTierAndMeasuredAgainstExact) {
  const ModelWeights& w = weights_for(WeightFormat::int8);
  BlockHarness h(w, small_layout(w.config, 10, 5, 90, true, true));
  const int64_t seq = h.layout.seq_len;
  std::vector<uint16_t> x = h.random_x(3);
  const std::vector<uint16_t> x0 = x;
  ExecOptions o = small_chunks();
  o.kv_store = KvTier::kvi8r;
  const std::vector<RowRange> exact_rows = {{0, 15}};
  for (const bool with_rows : {false, true}) {
    const SelfCheckResult r = self_check_block(
        *h.be, h.arena, h.view(), h.tensor(x), o,
        with_rows ? std::span<const RowRange>(exact_rows) : std::span<const RowRange>());
    EXPECT_TRUE(bits_equal(x, x0)) << "self_check modified x";
    ASSERT_EQ(r.variants.size(), 5u);
    for (const auto& v : r.variants) EXPECT_EQ(v.differing, 0) << v.name << " rows " << with_rows;
    ASSERT_TRUE(r.tier.has_value());
    EXPECT_EQ(r.tier->store, KvTier::kvi8r);
    EXPECT_GT(r.tier->rel_rms, 0.0);
    EXPECT_LT(r.tier->rel_rms, 0.05);
    EXPECT_GT(r.tier->max_abs, 0.0);
    const std::string line = r.line(seq);
    EXPECT_NE(line.find("bit-equal; kv_store kvi8r (approximate) vs the exact store: rel-rms"),
              std::string::npos)
        << line;
  }
  o.kv_store = KvTier::bf16;
  const SelfCheckResult exact = self_check_block(*h.be, h.arena, h.view(), h.tensor(x), o);
  EXPECT_FALSE(exact.tier.has_value());
  EXPECT_EQ(exact.line(seq).find("approximate"), std::string::npos);
}

ForwardOutputs forward_on(Backend& be, const ModelWeights& w, const PackedLayout& l,
                          const ExecOptions& o) {
  HostMemory mem;
  Arena arena(mem, 0);
  return run_forward(be, arena, w, l, random_inputs(w.config, l, 77), o);
}

TEST(ForwardSelfCheck, LogsOneBitEqualLine) {
  const ModelWeights& w = weights_for(WeightFormat::int8);
  const PackedLayout l = small_layout(w.config, 10, 5, 90, true, true);
  ExecOptions o = small_chunks();
  o.self_check = true;
  auto be = make_cpu_backend(2);
  const ForwardOutputs s = forward_on(*be, w, l, o);
  ASSERT_EQ(s.log.size(), 1u);
  for (const char* v : {"full 0 differ", "q_only 0 differ", "kv_only 0 differ", "mlp_only 0 differ",
                        "none 0 differ"})
    EXPECT_NE(s.log[0].find(v), std::string::npos) << s.log[0];
  EXPECT_NE(s.log[0].find("bit-equal"), std::string::npos) << s.log[0];
  EXPECT_EQ(s.log[0].find("DIVERGED"), std::string::npos) << s.log[0];
}

TEST(ForwardSelfCheck, LogsADivergingBackend) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  const PackedLayout l = small_layout(w.config, 10, 5, 90, true, true);
  ExecOptions o = small_chunks();
  o.self_check = true;
  PerturbingBackend be(l.seq_len);
  const ForwardOutputs s = forward_on(be, w, l, o);
  ASSERT_EQ(s.log.size(), 1u);
  EXPECT_NE(s.log[0].find("DIVERGED (full, q_only, mlp_only)"), std::string::npos) << s.log[0];
  EXPECT_EQ(s.log[0].find("bit-equal"), std::string::npos) << s.log[0];
}

}  // namespace
}  // namespace h3s::test
