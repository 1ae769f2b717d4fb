// The public C++ API through the installed shape of the library: this test
// links libh3stream.so and sees only include/h3s (no src/ include path), so
// it also proves the headers stand alone and that h3s::Error crosses the
// library boundary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <h3s/h3s.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

std::string make_checkpoint(const std::string& format) {
  // One file per test: ctest runs the tests of this binary as parallel processes.
  const std::string path = ::testing::TempDir() + "/h3s_api_tiny_" + format + "_" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           ".safetensors";
  const std::string cmd = std::string(H3S_CLI_PATH) + " make-checkpoint --preset tiny --blocks 1 " +
                          "--format " + format + " " + path + " > /dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "failed: " << cmd;
  return path;
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

h3s::Array random_bf16(std::vector<int64_t> shape, unsigned seed, float scale = 1.0f) {
  h3s::Array a(h3s::DType::bf16, std::move(shape));
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, scale);
  for (int64_t i = 0; i < a.numel(); ++i) a.data<uint16_t>()[i] = to_bf16(n(g));
  return a;
}

struct Inputs {
  h3s::Array video, audio, context;
  h3s::LatentInputs in;
};

Inputs inputs_for(const h3s::ModelInfo& m) {
  Inputs x;
  x.video = random_bf16({1, m.video_latent, 2, 5, 6}, 1);  // odd height: padded
  x.audio = random_bf16({1, m.audio_latent, 2, 7}, 2);
  x.context = random_bf16({1, 9, m.text_dim}, 3, 0.5f);
  x.in.video_latent = x.video.ref();
  x.in.audio_latent = x.audio.ref();
  x.in.context = x.context.ref();
  x.in.sigma = 0.45f;
  return x;
}

h3s::Options awkward() {
  h3s::Options o;
  o.q_chunk = 11;
  o.kv_chunk = 17;
  o.mlp_chunk = 5;
  o.min_tokens = 0;
  o.final_layer_chunk = 13;
  o.merge_tail_below = 0;
  return o;
}

TEST(EngineApi, ForwardStreamedEqualsStockAndKeepsTheLatentShapes) {
  for (const char* format : {"bf16", "int8", "w4a8"}) {
    SCOPED_TRACE(format);
    h3s::Engine eng = h3s::Engine::from_checkpoint(make_checkpoint(format));
    const h3s::ModelInfo m = eng.info();
    EXPECT_EQ(m.format, format);
    EXPECT_EQ(m.blocks, 1);
    EXPECT_EQ(eng.backend(), "cpu");
    const Inputs x = inputs_for(m);
    h3s::Options stock_opts;
    stock_opts.mode = h3s::ExecMode::stock;
    const h3s::LatentOutputs stock = eng.forward(x.in, stock_opts);
    const h3s::LatentOutputs streamed = eng.forward(x.in, awkward());
    EXPECT_EQ(streamed.report.streamed_blocks, 1);
    EXPECT_EQ(stock.report.stock_blocks, 1);
    EXPECT_EQ(stock.video.shape, x.video.shape);
    EXPECT_EQ(stock.audio.shape, x.audio.shape);
    EXPECT_EQ(stock.video.dtype, h3s::DType::bf16);
    EXPECT_EQ(stock.video.bytes, streamed.video.bytes);
    EXPECT_EQ(stock.audio.bytes, streamed.audio.bytes);
    EXPECT_NE(stock.video.bytes, x.video.bytes);  // a prediction, not the input
  }
}

// The caller's arrays (here: the file read into memory, entries viewed in
// place) load through the same loader and give the file's bits.
TEST(EngineApi, FromArraysEqualsFromCheckpoint) {
  const std::string path = make_checkpoint("int8");
  auto file = std::make_shared<std::vector<char>>();
  {
    std::ifstream f(path, std::ios::binary);
    file->assign(std::istreambuf_iterator<char>(f), {});
  }
  uint64_t header_len;
  std::memcpy(&header_len, file->data(), 8);
  const nlohmann::json header =
      nlohmann::json::parse(file->begin() + 8, file->begin() + 8 + long(header_len));
  const char* data = file->data() + 8 + header_len;
  const std::map<std::string, h3s::DType> dtypes = {
      {"BF16", h3s::DType::bf16}, {"F32", h3s::DType::f32}, {"I8", h3s::DType::i8},
      {"U8", h3s::DType::u8},     {"F16", h3s::DType::f16}, {"F8_E4M3", h3s::DType::f8e4m3}};
  std::vector<h3s::NamedArray> arrays;
  std::map<std::string, std::string> metadata;
  for (const auto& [name, e] : header.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, v] : e.items()) metadata[k] = v.get<std::string>();
      continue;
    }
    h3s::NamedArray a;
    a.name = name;
    a.array.dtype = dtypes.at(e.at("dtype").get<std::string>());
    a.array.shape = e.at("shape").get<std::vector<int64_t>>();
    a.array.data = data + e.at("data_offsets")[0].get<size_t>();
    arrays.push_back(std::move(a));
  }
  h3s::Engine from_file = h3s::Engine::from_checkpoint(path);
  h3s::Engine from_mem = h3s::Engine::from_arrays(arrays, metadata, file);
  const Inputs x = inputs_for(from_file.info());
  const h3s::LatentOutputs a = from_file.forward(x.in), b = from_mem.forward(x.in);
  EXPECT_EQ(a.video.bytes, b.video.bytes);
  EXPECT_EQ(a.audio.bytes, b.audio.bytes);
  EXPECT_THROW(h3s::Engine::from_arrays(arrays, metadata, nullptr), h3s::Error);
  std::erase_if(arrays, [](const h3s::NamedArray& n) { return n.name == "blocks.0.norm2.weight"; });
  ASSERT_EQ(arrays.size() + 1, header.size() - header.count("__metadata__"));
  try {
    h3s::Engine::from_arrays(arrays, metadata, file);
    ADD_FAILURE() << "a state dict missing a tensor loaded";
  } catch (const h3s::Error& e) {
    EXPECT_EQ(e.kind(), h3s::ErrorKind::bad_input);
    EXPECT_NE(std::string(e.what()).find("missing tensor 'blocks.0.norm2.weight'"),
              std::string::npos)
        << e.what();
  }
}

TEST(EngineApi, ErrorsCrossTheLibraryWithKindAndOperand) {
  h3s::Engine eng = h3s::Engine::from_checkpoint(make_checkpoint("bf16"));
  Inputs x = inputs_for(eng.info());
  x.in.sigma = std::nanf("");
  try {
    eng.forward(x.in);
    ADD_FAILURE() << "a NaN sigma ran";
  } catch (const h3s::Error& e) {
    EXPECT_EQ(e.kind(), h3s::ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("sigma"), std::string::npos) << e.what();
  }
  h3s::Options bad;
  bad.q_chunk = 0;
  x.in.sigma = 0.5f;
  EXPECT_THROW(eng.forward(x.in, bad), h3s::Error);
  try {
    h3s::Engine::from_checkpoint(::testing::TempDir() + "/no_such_file.safetensors");
    ADD_FAILURE() << "a missing file opened";
  } catch (const h3s::Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_file"), std::string::npos) << e.what();
  }
  h3s::EngineSetup setup;
  setup.backend = "tpu";
  EXPECT_THROW(h3s::Engine::from_checkpoint(make_checkpoint("bf16"), setup), h3s::Error);
  setup.backend = "cpu";
  setup.threads = -3;
  try {
    h3s::Engine::from_checkpoint(make_checkpoint("bf16"), setup);
    ADD_FAILURE() << "threads = -3 was taken";
  } catch (const h3s::Error& e) {
    EXPECT_NE(std::string(e.what()).find("threads = -3 is out of range"), std::string::npos)
        << e.what();
  }
}

// Every function the public headers declare links from the library (its version
// script exports the public API and nothing else): the names of Options' enums.
TEST(EngineApi, EnumNameFunctionsAreExported) {
  EXPECT_EQ(h3s::parse_kv_placement("host"), h3s::KvPlacement::host);
  EXPECT_EQ(h3s::kv_placement_name(h3s::KvPlacement::device), "device");
  EXPECT_EQ(h3s::parse_final_gemm("streamed"), h3s::FinalLayerGemm::streamed);
  EXPECT_EQ(h3s::final_gemm_name(h3s::FinalLayerGemm::exact), "exact");
  EXPECT_EQ(std::string(h3s::dtype_name(h3s::DType::bf16)), "bf16");
  EXPECT_EQ(h3s::parse_kv_tier("kvfp4s"), h3s::KvTier::kvfp4s);
  EXPECT_EQ(h3s::kv_tier_name(h3s::KvTier::kvmix), "kvmix");
}

// ComfyUI's block call through the public API: streamed == stock in place.
TEST(EngineApi, RunBlockStreamedEqualsStock) {
  h3s::Engine eng = h3s::Engine::from_checkpoint(make_checkpoint("int8"));
  const h3s::ModelInfo m = eng.info();
  const int64_t s = 97;
  const h3s::Array x0 = random_bf16({s, m.hidden}, 4);
  const h3s::Array t_emb = random_bf16({2, m.time_dim}, 5);
  h3s::Array rope(h3s::DType::bf16, {s, m.rope_dim / 2, 2});
  for (int64_t r = 0; r < s; ++r)
    for (int64_t i = 0; i < m.rope_dim / 2; ++i) {
      const float angle = float(r) * std::pow(10000.0f, -float(i % 16) / 16.0f);
      rope.data<uint16_t>()[(r * (m.rope_dim / 2) + i) * 2] = to_bf16(std::cos(angle));
      rope.data<uint16_t>()[(r * (m.rope_dim / 2) + i) * 2 + 1] = to_bf16(std::sin(angle));
    }
  auto run = [&](h3s::ExecMode mode, const h3s::Options& o) {
    h3s::Array x = x0;
    h3s::BlockCall c;
    c.x = x.ref();
    c.t_emb = t_emb.ref();
    c.rope = rope.ref();
    c.segments = {{0, 40, 1}, {40, s, 3}};
    c.mode = mode;
    c.options = o;
    EXPECT_EQ(eng.run_block(c), mode);
    return x;
  };
  const h3s::Array stock = run(h3s::ExecMode::stock, {});
  const h3s::Array streamed = run(h3s::ExecMode::streamed, awkward());
  EXPECT_EQ(stock.bytes, streamed.bytes);
  EXPECT_NE(stock.bytes, x0.bytes);

  // exact_av_rows in a single-block call: the text rows (mod row 1: text's
  // adaLN row) attend the exact K/V beside kvi8r, so the block's output rows
  // there are the exact store's, bit for bit; the video rows carry the tier's
  // error; and the streamed block still equals the tier's stock block.
  h3s::Options tier;
  tier.kv_store = h3s::KvTier::kvi8r;
  tier.exact_av_rows = true;
  h3s::Options tier_streamed = awkward();
  tier_streamed.kv_store = h3s::KvTier::kvi8r;
  tier_streamed.exact_av_rows = true;
  const h3s::Array tier_stock = run(h3s::ExecMode::stock, tier);
  EXPECT_EQ(run(h3s::ExecMode::streamed, tier_streamed).bytes, tier_stock.bytes);
  const size_t row_bytes = size_t(m.hidden) * 2, text_bytes = 40 * row_bytes;
  EXPECT_EQ(std::memcmp(tier_stock.bytes.data(), stock.bytes.data(), text_bytes), 0);
  EXPECT_NE(std::memcmp(tier_stock.bytes.data() + text_bytes, stock.bytes.data() + text_bytes,
                        tier_stock.bytes.size() - text_bytes),
            0);
  tier.exact_av_rows = false;  // without: the text rows carry the tier's error too
  const h3s::Array tier_only = run(h3s::ExecMode::stock, tier);
  EXPECT_NE(std::memcmp(tier_only.bytes.data(), stock.bytes.data(), text_bytes), 0);
}

}  // namespace
