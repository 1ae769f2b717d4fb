// Forward-level equality (stock vs streamed through embeds, refiner, every
// block and the final layer), final-layer modes, the memory ledger and the
// forward's error paths.
#include <gtest/gtest.h>

#include <cstring>

#include "exec/forward.hpp"
#include "exec_fixture.hpp"

namespace h3s::test {
namespace {

struct Run {
  ForwardOutputs out;
};

ForwardOutputs forward(const ModelWeights& w, const PackedLayout& l, const ExecOptions& o,
                       size_t budget = 0, int threads = 2) {
  HostMemory mem;
  Arena arena(mem, budget);
  auto be = make_cpu_backend(threads);
  const ForwardInputs in = random_inputs(w.config, l, 77);
  return run_forward(*be, arena, w, l, in, o);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class Forward : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(Forward, StreamedEqualsStockBitForBit) {
  const ModelWeights& w = weights_for(GetParam());
  const PackedLayout l = small_layout(w.config, 23, 9, 131, true, true);  // 173 tokens
  const ForwardOutputs stock = forward(w, l, ExecOptions::stock());
  ASSERT_EQ(stock.stock_blocks, w.config.blocks);
  ASSERT_EQ(int64_t(stock.video.size()), 131 * w.config.video_features());
  ASSERT_EQ(int64_t(stock.audio.size()), 2 * 9 * w.config.audio_latent);
  for (const ExecOptions& o : {streamed_options(37, 41, 43, 128, 19, FinalLayerGemm::exact),
                               streamed_options(1, 173, 2, 128, 1, FinalLayerGemm::streamed),
                               streamed_options(64, 7, 0, 0, 0, FinalLayerGemm::exact),
                               streamed_options(173, 1, 97, 384, 300, FinalLayerGemm::streamed)}) {
    const ForwardOutputs s = forward(w, l, o);
    EXPECT_EQ(s.streamed_blocks, w.config.blocks);
    EXPECT_TRUE(same_bits(stock.video, s.video)) << "q " << o.q_chunk << " kv " << o.kv_chunk;
    EXPECT_TRUE(same_bits(stock.audio, s.audio)) << "q " << o.q_chunk << " kv " << o.kv_chunk;
  }
}

TEST_P(Forward, CurveTimeFormAndNoTrimAreExactToo) {
  const ModelWeights& w = weights_for(GetParam(), TimeForm::curve);
  const PackedLayout l = small_layout(w.config, 11, 6, 70, false, false);
  const ForwardOutputs stock = forward(w, l, ExecOptions::stock());
  ExecOptions o = streamed_options(13, 17, 19, 128, 23, FinalLayerGemm::streamed);
  o.trim_forward = false;
  const ForwardOutputs s = forward(w, l, o, 0, 1);
  EXPECT_TRUE(same_bits(stock.video, s.video));
  EXPECT_TRUE(same_bits(stock.audio, s.audio));
}

INSTANTIATE_TEST_SUITE_P(Formats, Forward,
                         ::testing::Values(WeightFormat::bf16, WeightFormat::int8,
                                           WeightFormat::w4a8, WeightFormat::nvfp4),
                         [](const auto& p) { return std::string(format_name(p.param)); });

TEST(ForwardOutputs, AreFiniteDeterministicAndDependOnInputs) {
  const ModelWeights& w = weights_for(WeightFormat::int8);
  const PackedLayout l = small_layout(w.config, 8, 4, 40, false, false);
  const ExecOptions o = streamed_options(16, 16, 16, 0, 16, FinalLayerGemm::exact);
  const ForwardOutputs a = forward(w, l, o), b = forward(w, l, o);
  EXPECT_TRUE(same_bits(a.video, b.video));
  for (float v : a.video) ASSERT_TRUE(std::isfinite(v));
  // A different sigma changes the modulation, so the outputs must change.
  const PackedLayout l2 = small_layout(w.config, 8, 4, 40, false, false, 0.3f);
  EXPECT_FALSE(same_bits(a.video, forward(w, l2, o).video));
}

TEST(ForwardMinTokens, ShortSequencesRunStock) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  const PackedLayout l = small_layout(w.config, 4, 2, 30, false, false);  // 38 tokens
  ExecOptions o = streamed_options(8, 8, 8, 0, 8, FinalLayerGemm::exact);
  o.min_tokens = 39;
  EXPECT_EQ(forward(w, l, o).stock_blocks, w.config.blocks);
  o.min_tokens = 38;
  EXPECT_EQ(forward(w, l, o).streamed_blocks, w.config.blocks);
}

// The ledger shows what streaming removes: stock materialises the fused QKV
// [S, 3 * inner] and the MLP intermediates [S, 2 * ffn] for the whole
// sequence; streamed keeps the K/V store [S, 2 * inner] plus chunk buffers.
TEST(ForwardLedger, StreamedPeakBelowStockByTheExpectedOrder) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  const ModelConfig& c = w.config;
  const PackedLayout l = small_layout(c, 40, 20, 940, false, false);  // 1020 tokens
  const int64_t s = l.seq_len, chunk = 64;
  const ForwardOutputs stock = forward(w, l, ExecOptions::stock());
  const ForwardOutputs str =
      forward(w, l, streamed_options(chunk, chunk, chunk, 0, chunk, FinalLayerGemm::streamed));
  auto phase_peak = [](const ForwardOutputs& f, Phase p) {
    size_t m = 0;
    for (const LedgerEntry& e : f.ledger)
      if (e.phase == p && e.block >= 0) m = std::max(m, e.peak);
    return m;
  };
  const size_t x_bytes = size_t(s * c.hidden * 2);
  // Stock holds x plus the whole fused QKV in its kv phase, x plus fc1's
  // [S, 2 * ffn] output in its MLP phase.
  EXPECT_GE(phase_peak(stock, Phase::kv), x_bytes + size_t(s * 3 * c.inner() * 2));
  EXPECT_GE(phase_peak(stock, Phase::mlp), x_bytes + size_t(s * 2 * c.ffn * 2));
  // Streamed holds x plus the K/V store plus O(chunk) buffers.
  const size_t kv = size_t(s * 2 * c.inner() * 2);
  const size_t chunk_slack = size_t(chunk * (3 * c.inner() + 2 * c.ffn + 4 * c.hidden) * 8);
  const size_t fixed_slack = size_t(1) << 20;  // rope table, mods, adaLN input
  EXPECT_LE(phase_peak(str, Phase::attn), x_bytes + kv + chunk_slack + fixed_slack);
  EXPECT_LE(phase_peak(str, Phase::mlp), x_bytes + chunk_slack + fixed_slack);
  EXPECT_LT(str.peak_bytes, stock.peak_bytes);
  // The MLP phase is where stock peaks hardest; streamed there is x + chunks.
  EXPECT_LT(phase_peak(str, Phase::mlp) * 2, phase_peak(stock, Phase::mlp));
}

TEST(ForwardErrors, BadInputsNameTheProblem) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  const PackedLayout l = small_layout(w.config, 4, 2, 10, false, false);
  HostMemory mem;
  Arena arena(mem, 0);
  auto be = make_cpu_backend(1);
  ForwardInputs in = random_inputs(w.config, l, 1);
  in.audio_rows.pop_back();
  try {
    run_forward(*be, arena, w, l, in, ExecOptions::stock());
    FAIL() << "short audio accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("audio_rows"), std::string::npos) << e.what();
  }
  ExecOptions bad;
  bad.q_chunk = 0;
  EXPECT_THROW(bad.validate(), Error);
  try {
    parse_kv_tier("kvi4");
    FAIL() << "unknown kv store accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kvi4"), std::string::npos);
  }
}

TEST(ForwardErrors, BudgetTooSmallFailsWithNumbers) {
  const ModelWeights& w = weights_for(WeightFormat::bf16);
  const PackedLayout l = small_layout(w.config, 4, 2, 100, false, false);
  try {
    forward(w, l, ExecOptions::stock(), 64 * 1024);
    FAIL() << "64 KiB budget accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("64.0 KiB"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace h3s::test
