// PackedLayout against ComfyUI's layout: hand-computed segments, timesteps and
// mod runs, and positions / RoPE table against the golden file (whose
// positions were produced by ComfyUI's own PackedLayout on the GPU machine).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.hpp"
#include "model/packed_layout.hpp"
#include "model/safetensors.hpp"

namespace h3s {
namespace {

const ModelConfig kCfg = ModelConfig::tiny();

TEST(PackedLayout, SegmentsTimestepsAndModRunsByHand) {
  LayoutSpec s;
  s.text_len = 7;
  s.text_tags = {1, 1, 0, 0, 2, 1, 1};  // a vision pad run and an audio-tagged token
  s.latent_t = 2;
  s.latent_h = 4;
  s.latent_w = 6;  // 2 x 3 patches per frame
  s.audio_t = 3;
  s.cond_first_frame = true;
  s.sigma = 0.5f;
  const PackedLayout l = PackedLayout::build(s, kCfg);
  // text 7 | cond 6 | audio 6 | video 12
  ASSERT_EQ(l.seq_len, 31);
  ASSERT_EQ(l.segments.size(), 4u);
  EXPECT_EQ(l.segments[1].kind, SegmentKind::cond);
  EXPECT_EQ(l.segments[1].begin, 7);
  EXPECT_EQ(l.audio.begin, 13);
  EXPECT_EQ(l.audio.end, 19);
  EXPECT_EQ(l.video.begin, 19);
  EXPECT_EQ(l.video.end, 31);
  // sigma 0.5: t_v = 0.5; audio sigma 3b/(1+2b) with b = 0.5/(12-5.5) -> 0.2,
  // t_a = 0.8; cond rows t = max(t_v, 0.999).
  ASSERT_EQ(l.timesteps.size(), 3u);
  EXPECT_FLOAT_EQ(l.timesteps[0], 0.5f);
  EXPECT_NEAR(l.timesteps[1], 0.8f, 1e-6f);
  EXPECT_FLOAT_EQ(l.timesteps[2], 0.999f);
  EXPECT_EQ(l.video_t_row, 0);
  EXPECT_EQ(l.audio_t_row, 1);
  // mod row = timestep index * 3 + tag (0 video, 1 text, 2 audio).
  const std::vector<ModRun> want = {{0, 2, 1},  {2, 4, 0},   {4, 5, 2},  {5, 7, 1},
                                    {7, 13, 6}, {13, 19, 5}, {19, 31, 0}};
  EXPECT_EQ(l.mod_runs, want);
  EXPECT_EQ(l.mod_rows(), 9);
  // Clipping to a chunk rebases the runs onto the chunk.
  const std::vector<ModRun> clipped = {{0, 1, 0}, {1, 2, 2}, {2, 4, 1}, {4, 6, 6}};
  EXPECT_EQ(l.runs_in({3, 9}), clipped);
}

TEST(PackedLayout, PositionsByHand) {
  LayoutSpec s;
  s.text_len = 2;
  s.latent_t = 6;  // crosses the 5-frame cycle of frame durations
  s.latent_h = 2;
  s.latent_w = 2;
  s.audio_t = 2;
  const PackedLayout l = PackedLayout::build(s, kCfg);
  auto pos = [&](int64_t row, int axis) { return l.positions[size_t(row * 3 + axis)]; };
  EXPECT_EQ(pos(1, 0), 1.0);  // text: (i, 0, 0)
  EXPECT_EQ(pos(1, 1), 0.0);
  // 1 x 1 patch grid: ratio 1, axis value (0 + 0) * 32 = 0; audio w pinned to it.
  EXPECT_EQ(pos(2, 0), 2.0);  // audio ch0 t0 at the text origin
  EXPECT_EQ(pos(3, 0), 3.0);  // ch0 t1
  EXPECT_EQ(pos(4, 0), 2.0);  // ch1 t0
  // Video frame k starts at origin + sum of (5/3) * {1, 4, 4, 4, 4}[j % 5], j < k.
  const double r = 5.0 / 3.0;
  const double t[6] = {2.0, 2.0 + r, 2.0 + 5 * r, 2.0 + 9 * r, 2.0 + 13 * r, 2.0 + 17 * r};
  for (int k = 0; k < 6; ++k) EXPECT_DOUBLE_EQ(pos(6 + k, 0), t[k]) << "frame " << k;
}

// An image-to-video keyframe latent of several frames (ComfyUI's keyframe at
// resolved_frame_index 0): its rows sit on the target's first frames' grid,
// at timestep max(t_v, visual_cond_noise_aug).
TEST(PackedLayout, MultiFrameKeyframeAndItsTimestep) {
  LayoutSpec s;
  s.text_len = 3;
  s.latent_t = 4;
  s.latent_h = 4;
  s.latent_w = 2;  // 2 x 1 patches per frame
  s.audio_t = 1;
  s.cond_first_frame = true;
  s.cond_latent_t = 3;
  s.sigma = 0.2f;
  const PackedLayout l = PackedLayout::build(s, kCfg);
  // text 3 | cond 3 frames x 2 | audio 2 | video 4 x 2
  ASSERT_EQ(l.seq_len, 3 + 6 + 2 + 8);
  EXPECT_EQ(l.rows_of(SegmentKind::cond), 6);
  for (int64_t r = 0; r < 6; ++r)
    for (int axis = 0; axis < 3; ++axis)
      EXPECT_EQ(l.positions[size_t((3 + r) * 3 + axis)],
                l.positions[size_t((l.video.begin + r) * 3 + axis)])
          << "cond row " << r << " axis " << axis;
  ASSERT_EQ(l.timesteps.size(), 3u);  // t_v 0.8, t_a, cond 0.999
  EXPECT_FLOAT_EQ(l.timesteps.back(), 0.999f);

  s.visual_cond_aug = 0.5;  // below t_v: the cond rows share the video timestep
  const PackedLayout low = PackedLayout::build(s, kCfg);
  ASSERT_EQ(low.timesteps.size(), 2u);
  EXPECT_EQ(low.mod_runs[1].mod_row, low.mod_runs.back().mod_row);  // cond == video row

  s.cond_latent_t = 0;
  EXPECT_THROW(PackedLayout::build(s, kCfg), Error);
}

TEST(PackedLayout, PositionsAndRopeTableMatchComfyUI) {
  // The golden rms_rope case packs 5 text rows, 10 audio frames x 2 channels and
  // 2 latent frames of 2 x 3 patches with ComfyUI's PackedLayout.
  const SafetensorsFile f =
      SafetensorsFile::open(std::string(H3S_TEST_DATA_DIR) + "/golden/ck_rms_rope.safetensors");
  LayoutSpec s;
  s.text_len = 5;
  s.audio_t = 10;
  s.latent_t = 2;
  s.latent_h = 4;
  s.latent_w = 6;
  const PackedLayout l = PackedLayout::build(s, kCfg);
  ASSERT_EQ(l.seq_len, 37);
  const std::vector<float> golden = f.read_as<float>("positions", "F32");
  ASSERT_EQ(golden.size(), 37u * 3);
  for (size_t i = 0; i < golden.size(); ++i)
    EXPECT_EQ(float(l.positions[i]), golden[i]) << "row " << i / 3 << " axis " << i % 3;

  const std::vector<float> inv = f.read_as<float>("inv_freq", "F32");
  const std::vector<uint16_t> table = rope_table(l, inv, 96);
  const std::vector<uint16_t> want = f.read_as<uint16_t>("rope_table", "BF16");  // [37,48,2,2]
  ASSERT_EQ(want.size(), 37u * 48 * 4);
  int bad = 0;
  for (size_t p = 0; p < 37u * 48; ++p)
    bad += table[2 * p] != want[4 * p] || table[2 * p + 1] != want[4 * p + 2];
  EXPECT_EQ(bad, 0) << "of " << 37 * 48 << " (cos, sin) pairs";
}

TEST(PackedLayout, VideoShapeMatchesTheReleasedPacking) {
  // 702 frames at 1376 x 768: 207 latent frames of 43 x 24 patches.
  const VideoShape v{702, 1376, 768};
  EXPECT_EQ(v.latent_t(), 207);
  EXPECT_EQ(v.latent_t() * (v.latent_w() / 2) * (v.latent_h() / 2), 213624);
}

TEST(PackedLayout, BadSpecsNameTheField) {
  LayoutSpec s;
  s.latent_t = 1;
  s.latent_h = 3;
  s.latent_w = 2;
  try {
    PackedLayout::build(s, kCfg);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("latent_h = 3"), std::string::npos) << e.what();
  }
  s.latent_h = 2;
  s.text_len = 2;
  s.text_tags = {1, 5};
  EXPECT_THROW(PackedLayout::build(s, kCfg), Error);
  s.text_tags = {1};
  EXPECT_THROW(PackedLayout::build(s, kCfg), Error);
  s.text_tags.clear();
  s.sigma = 0.0f;
  EXPECT_THROW(PackedLayout::build(s, kCfg), Error);
}

TEST(ChunkPlanLayout, RunsCoverEveryChunkExactly) {
  LayoutSpec s;
  s.text_len = 11;
  s.text_tags.assign(11, 1);
  s.text_tags[4] = 0;
  s.latent_t = 9;
  s.latent_h = 2;
  s.latent_w = 4;
  s.audio_t = 5;
  const PackedLayout l = PackedLayout::build(s, kCfg);
  for (int64_t chunk : {1, 2, 3, 7, 16, 100}) {
    for (const RowRange& r : ChunkPlan::fixed(l.seq_len, chunk).chunks) {
      int64_t at = 0;
      for (const ModRun& m : l.runs_in(r)) {
        EXPECT_EQ(m.begin, at);
        at = m.end;
      }
      EXPECT_EQ(at, r.size());
    }
  }
}

}  // namespace
}  // namespace h3s
