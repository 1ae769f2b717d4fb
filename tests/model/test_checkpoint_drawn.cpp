// Drawn checkpoints (write_drawn_checkpoint): the seeded writer's header bit
// for bit, every format loads with the seeded weights' spread, the bytes do
// not depend on the thread count or the batching, and a deep forward over
// them stays finite.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.hpp"
#include "core/arena.hpp"
#include "core/dtype.hpp"
#include "core/thread_pool.hpp"
#include "exec/exec_fixture.hpp"
#include "exec/forward.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_drawn.hpp"
#include "model/drawn_tensors.hpp"
#include "model/safetensors.hpp"
#include "temp_dir.hpp"

namespace h3s::test {
namespace {

using test::TempDir;

constexpr WeightFormat kFormats[] = {WeightFormat::bf16, WeightFormat::int8, WeightFormat::w4a8,
                                     WeightFormat::nvfp4};

std::vector<char> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The 8-byte length and the JSON header: names, dtypes, shapes, offsets, metadata.
std::vector<char> header_bytes(const std::string& path) {
  const std::vector<char> b = file_bytes(path);
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  return {b.begin(), b.begin() + std::ptrdiff_t(8 + n)};
}

ModelConfig with_form(ModelConfig c, TimeForm form) {
  if (form == TimeForm::curve) {
    c.time_form = TimeForm::curve;
    c.time_dim = 8;  // the released curve checkpoints' adaln_t_table width
  }
  return c;
}

class CheckpointDrawnHeader : public ::testing::TestWithParam<std::tuple<WeightFormat, TimeForm>> {
};

// Same keys, dtypes, shapes and offsets as the seeded file: the same header
// bytes, given the same metadata.
TEST_P(CheckpointDrawnHeader, IsTheSeededFilesHeader) {
  const auto [format, form] = GetParam();
  const ModelConfig c = with_form(ModelConfig::tiny(), form);
  TempDir dir;
  const std::string seeded = dir.file("seeded.safetensors"), drawn = dir.file("drawn.safetensors");
  write_checkpoint(ModelWeights::random(c, format, 3), seeded, {{"k", "v"}});
  write_drawn_checkpoint(drawn, c, format, 3, {{"k", "v"}});
  EXPECT_EQ(header_bytes(seeded), header_bytes(drawn));
  EXPECT_EQ(std::filesystem::file_size(seeded), std::filesystem::file_size(drawn));
  EXPECT_EQ(TempDir::names_in(dir.path()),
            (std::vector<std::string>{"drawn.safetensors", "seeded.safetensors"}));
}

INSTANTIATE_TEST_SUITE_P(, CheckpointDrawnHeader,
                         ::testing::Combine(::testing::ValuesIn(kFormats),
                                            ::testing::Values(TimeForm::full, TimeForm::curve)),
                         [](const auto& p) {
                           return std::string(format_name(std::get<0>(p.param))) +
                                  (std::get<1>(p.param) == TimeForm::full ? "_full" : "_curve");
                         });

// The dequantised values of a layer (host arrays), as the engine multiplies them.
std::vector<float> dequantised(const QuantLinear& q) {
  std::vector<float> w(size_t(q.out * q.in));
  switch (q.format) {
    case WeightFormat::bf16:
      for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_f32(bf16{q.w_bf16[i]});
      break;
    case WeightFormat::int8:
      for (size_t i = 0; i < w.size(); ++i) w[i] = float(q.w_i8[i]) * q.w_scale[i / size_t(q.in)];
      break;
    case WeightFormat::w4a8: {
      const std::vector<int8_t> w8 = decode_w4a8_values(q);
      for (size_t i = 0; i < w.size(); ++i) w[i] = float(w8[i]) * q.w_scale[i / size_t(q.in)];
      break;
    }
    case WeightFormat::nvfp4: {
      const std::vector<uint16_t> b = decode_nvfp4_values(q);
      for (size_t i = 0; i < w.size(); ++i) w[i] = bf16_to_f32(bf16{b[i]});
      break;
    }
    case WeightFormat::f32:
      for (size_t i = 0; i < w.size(); ++i) w[i] = q.w_f32[i];
      break;
  }
  return w;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += double(x) * double(x);
  return std::sqrt(s / double(v.size()));
}

// The draws' spread constants follow from their definitions.
TEST(CheckpointDrawn, SpreadConstantsFollowFromTheirDefinitions) {
  double int8 = 0, w4 = 0, e2m1 = 0;
  for (int c = -127; c <= 127; ++c) int8 += double(c) * c / 255.0;
  for (int l = -7; l <= 7; ++l) w4 += double(l) * l / 15.0;
  for (uint8_t c = 0; c < 16; ++c) e2m1 += double(e2m1_to_f32(c)) * e2m1_to_f32(c) / 16.0;
  EXPECT_NEAR(std::sqrt(int8), kDrawnInt8CodeStd, 1e-7);
  EXPECT_NEAR(std::sqrt(w4), kDrawnW4LevelStd, 1e-8);
  EXPECT_NEAR(std::sqrt(e2m1), kDrawnE2m1Std, 1e-8);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(kDrawnW4SRel)), kDrawnW4SRel);
  EXPECT_EQ(e4m3_to_f32(f32_to_e4m3(kDrawnFp4BlockScale)), kDrawnFp4BlockScale);
}

// An NVFP4 layer whose shape is not a multiple of the padded arrays': codes
// and block scales are zero outside [out, in] (as the quantiser leaves them),
// and every scale of the layer sits where nvfp4_scale_offset puts it.
TEST(CheckpointDrawn, Nvfp4PaddingStaysZero) {
  const int64_t out = 20, in = 24;  // padded to [32, 32]: 16 code bytes a row, 2 blocks of 4
  DrawnTensor codes;
  codes.kind = DrawKind::fp4_codes;
  codes.rows = out;
  codes.cols = in;
  codes.byte_size = 32 * 16;
  std::vector<std::byte> c(codes.byte_size);
  draw_piece(codes, 0, c);
  int nonzero = 0;
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t k = 0; k < 32; ++k) {
      const uint8_t byte = std::to_integer<uint8_t>(c[size_t(r * 16 + k / 2)]);
      const uint8_t code = k % 2 == 0 ? uint8_t(byte >> 4) : uint8_t(byte & 0x0f);
      if (r >= out || k >= in) {
        EXPECT_EQ(code, 0) << r << ", " << k;
      }
      nonzero += code != 0;
    }
  EXPECT_GT(nonzero, out * in / 2);  // 15 of 16 codes are not zero: drawn, not left empty
  DrawnTensor scales;
  scales.kind = DrawKind::fp4_block_scales;
  scales.code = f32_to_e4m3(kDrawnFp4BlockScale);
  scales.rows = out;
  scales.cols = in;
  scales.byte_size = 128 * 4;
  std::vector<std::byte> sc(scales.byte_size);
  draw_piece(scales, 0, sc);
  for (int64_t r = 0; r < 128; ++r)
    for (int64_t b = 0; b < 4; ++b)
      EXPECT_EQ(std::to_integer<uint8_t>(sc[size_t(nvfp4_scale_offset(r, b, 4))]),
                r < out && b < 2 ? scales.code : 0)
          << r << ", " << b;
}

class CheckpointDrawnFormat : public ::testing::TestWithParam<WeightFormat> {};

// Every format loads, and each weight's dequantised spread is the seeded
// weights' gain / sqrt(in) (adaLN's gain 0.3). The bound: the spread is the
// definition's by construction (codes and levels uniform, scales chosen from
// the constants above, zero-mean draws); what remains is sampling error, at
// most 1/sqrt(2n) ~ 0.3% relative for the smallest layer here (n = 65,536),
// the multiply-shift draws' non-uniformity (each value from 65536/n inputs,
// +-1: < 0.5%) and bf16 rounding (< 0.4%): 2% holds them with room.
TEST_P(CheckpointDrawnFormat, LoadsWithTheSeededSpread) {
  const WeightFormat format = GetParam();
  constexpr double kRelTol = 0.02;
  TempDir dir;
  const std::string path = dir.file("drawn.safetensors");
  ModelConfig c = ModelConfig::tiny();
  c.blocks = 1;
  write_drawn_checkpoint(path, c, format, 11);
  CheckpointSummary summary;
  const ModelWeights w = load_checkpoint(path, &summary);
  EXPECT_EQ(w.format, format);
  ASSERT_EQ(w.blocks.size(), 1u);
  const BlockWeights& b = w.blocks[0];
  for (const QuantLinear* q : {&b.attn.qkv, &b.attn.out, &b.mlp.fc1, &b.mlp.fc2}) {
    EXPECT_EQ(q->format, format);
    const std::vector<float> v = dequantised(*q);
    for (float x : v) ASSERT_TRUE(std::isfinite(x));
    EXPECT_NEAR(rms(v) * std::sqrt(double(q->in)), 1.0, kRelTol) << q->out << " x " << q->in;
  }
  EXPECT_NEAR(rms(dequantised(b.adaln)) * std::sqrt(double(b.adaln.in)), 0.3, 0.3 * kRelTol);
  const std::vector<float> patch = dequantised(w.video_patch);
  EXPECT_NEAR(rms(patch) * std::sqrt(double(w.video_patch.in)), 1.0, kRelTol);
}

// Drawn pieces are independent streams: one thread drawing one piece a batch
// and three drawing large batches give the same bytes; another seed differs.
TEST_P(CheckpointDrawnFormat, SameBytesWhateverTheThreadsAndBatches) {
  const WeightFormat format = GetParam();
  TempDir dir;
  const ModelConfig c = ModelConfig::tiny();
  DrawnCheckpointOptions one;
  one.threads = 1;
  one.batch_bytes = 1;  // one piece a batch
  DrawnCheckpointOptions many;
  many.threads = 3;
  write_drawn_checkpoint(dir.file("one.safetensors"), c, format, 5, {}, one);
  write_drawn_checkpoint(dir.file("many.safetensors"), c, format, 5, {}, many);
  write_drawn_checkpoint(dir.file("other.safetensors"), c, format, 6, {}, many);
  const std::vector<char> a = file_bytes(dir.file("one.safetensors"));
  EXPECT_TRUE(a == file_bytes(dir.file("many.safetensors")));
  EXPECT_FALSE(a == file_bytes(dir.file("other.safetensors")));
}

// Progress: monotone, the last block completed by its last run (the
// smallest element size holding block tensors: the token refiner's tensors
// follow it in name order, so it is reported before the end), then the end
// with every byte of the file.
TEST_P(CheckpointDrawnFormat, ReportsBlocksRunByRunThenTheEnd) {
  const WeightFormat format = GetParam();
  const std::string last_run = format == WeightFormat::bf16   ? "BF16"
                               : format == WeightFormat::int8 ? "I8/U8"
                               : format == WeightFormat::w4a8 ? "F8_E4M3/I8/U8"
                                                              : "F8_E4M3/U8";
  TempDir dir;
  ModelConfig c = ModelConfig::tiny();
  c.blocks = 3;
  std::vector<DrawnProgress> seen;
  DrawnCheckpointOptions o;
  o.batch_bytes = 1;  // batches of one piece or of small whole tensors: many reports
  o.on_progress = [&](const DrawnProgress& p) { seen.push_back(p); };
  const std::string path = dir.file("p.safetensors");
  write_drawn_checkpoint(path, c, format, 1, {}, o);
  ASSERT_GE(seen.size(), 2u);
  for (size_t i = 1; i < seen.size(); ++i) {
    EXPECT_GT(seen[i].bytes_done, seen[i - 1].bytes_done);
    EXPECT_GE(seen[i].blocks_done, seen[i - 1].blocks_done);
  }
  for (const DrawnProgress& p : seen) {
    EXPECT_EQ(p.blocks, 3);
    EXPECT_EQ(p.bytes, std::filesystem::file_size(path));
    EXPECT_LE(p.blocks_done, p.section_blocks_done);
  }
  const DrawnProgress& before_end = seen[seen.size() - 2];
  EXPECT_EQ(before_end.tensors, last_run);
  EXPECT_EQ(before_end.section_blocks_done, 3);
  EXPECT_EQ(before_end.blocks_done, 3);
  EXPECT_TRUE(seen.back().tensors.empty());
  EXPECT_EQ(seen.back().blocks_done, 3);
  EXPECT_EQ(seen.back().bytes_done, std::filesystem::file_size(path));
}

// The h3 depth (50 blocks) on the micro width: drawn weights of every
// format keep a forward finite, as the seeded ones do (the small adaLN
// modulation keeps activations in range).
TEST_P(CheckpointDrawnFormat, FiftyBlockForwardIsFinite) {
  const WeightFormat format = GetParam();
  ModelConfig c = micro_config();
  c.blocks = ModelConfig::h3().blocks;
  TempDir dir;
  const std::string path = dir.file("deep.safetensors");
  write_drawn_checkpoint(path, c, format, 9);
  const ModelWeights w = load_checkpoint(path);
  const PackedLayout l = small_layout(c, 9, 4, 13, true, true);
  HostMemory mem;
  Arena arena(mem, 0);
  auto be = make_cpu_backend(2);
  const ForwardOutputs o =
      run_forward(*be, arena, w, l, random_inputs(c, l, 5), ExecOptions::stock());
  ASSERT_EQ(int64_t(o.video.size()), 13 * c.video_features());
  ASSERT_FALSE(o.audio.empty());
  for (float v : o.video) ASSERT_TRUE(std::isfinite(v));
  for (float v : o.audio) ASSERT_TRUE(std::isfinite(v));
  EXPECT_GT(rms(o.video), 0.0);
}

INSTANTIATE_TEST_SUITE_P(, CheckpointDrawnFormat, ::testing::ValuesIn(kFormats),
                         [](const auto& p) { return std::string(format_name(p.param)); });

TEST(CheckpointDrawn, BadThreadCountFailsBeforeAnyFile) {
  TempDir dir;
  DrawnCheckpointOptions o;
  o.threads = ThreadPool::max_threads() + 1;
  EXPECT_THROW(write_drawn_checkpoint(dir.file("x.safetensors"), ModelConfig::tiny(),
                                      WeightFormat::int8, 1, {}, o),
               Error);
  EXPECT_TRUE(dir.names().empty());
}

}  // namespace
}  // namespace h3s::test
