// Bad checkpoint files: every one is rejected with Error(bad_input) whose one
// line names the file, the tensor (or layer) and what was expected, never a
// crash. Each bad file starts from a good micro checkpoint and changes one thing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "checkpoint_entries.hpp"
#include "core/error.hpp"
#include "exec/exec_fixture.hpp"
#include "model/checkpoint.hpp"
#include "model/safetensors.hpp"
#include "temp_dir.hpp"

namespace h3s::test {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

std::vector<std::byte> text_bytes(const std::string& s) {
  return as_bytes(std::vector<char>(s.begin(), s.end()));
}

// A good checkpoint's tensors and metadata, to be edited into a bad one.
struct Checkpoint {
  std::vector<Owned> tensors;
  std::map<std::string, std::string> metadata;

  Owned& at(const std::string& name) { return entry_named(tensors, name); }
  void drop(const std::string& name) {
    const auto n = tensors.size();
    std::erase_if(tensors, [&](const Owned& o) { return o.name == name; });
    if (tensors.size() == n) throw std::runtime_error("test fixture: no tensor " + name);
  }
  void write(const std::string& path) const { write_entries(path, tensors, metadata); }
};

// The good micro checkpoints, one per format, written once for the suite.
class CheckpointBadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<TempDir>();
    for (WeightFormat f : {WeightFormat::int8, WeightFormat::w4a8, WeightFormat::nvfp4}) {
      const std::string path = dir_->file(std::string(format_name(f)) + ".safetensors");
      write_checkpoint(ModelWeights::random(micro_config(), f, 11), path);
      good_path_[int(f)] = path;
      const SafetensorsFile file = SafetensorsFile::open(path);
      good_[int(f)] = {read_entries(file), file.metadata()};
    }
  }
  static void TearDownTestSuite() {
    good_.clear();
    good_path_.clear();
    dir_.reset();
  }

  static Checkpoint good(WeightFormat f) { return good_.at(int(f)); }
  static std::string good_bytes(WeightFormat f) {
    std::ifstream in(good_path_.at(int(f)), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // A fresh path for one bad file (removed with the suite's directory).
  std::string bad_path() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return dir_->file(std::string(info->name()) + "_" + std::to_string(counter_++) +
                      ".safetensors");
  }

  // Loads `path` and expects Error(bad_input): one line naming the file and
  // containing every needle.
  static void expect_rejected(const std::string& path, const std::vector<std::string>& needles) {
    try {
      (void)load_checkpoint(path);
      ADD_FAILURE() << "expected Error(bad_input) for " << path << ", it loaded";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::bad_input) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << "one line: " << msg;
      EXPECT_NE(msg.find(path), std::string::npos) << "file not named: " << msg;
      for (const std::string& n : needles)
        EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected h3s::Error, got std::exception: " << e.what();
    }
  }
  void expect_rejected(const Checkpoint& c, const std::vector<std::string>& needles) {
    const std::string path = bad_path();
    c.write(path);
    expect_rejected(path, needles);
  }
  void expect_raw_rejected(const std::string& bytes, const std::vector<std::string>& needles) {
    const std::string path = bad_path();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    ASSERT_TRUE(out.good());
    expect_rejected(path, needles);
  }

  static inline std::unique_ptr<TempDir> dir_;
  static inline std::map<int, Checkpoint> good_;
  static inline std::map<int, std::string> good_path_;
  int counter_ = 0;
};

// ---- the raw safetensors container -------------------------------------------

struct RawFile {
  nlohmann::json header;
  std::string data;

  static RawFile parse(const std::string& bytes) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
    RawFile r;
    r.header = nlohmann::json::parse(bytes.substr(8, n));
    r.data = bytes.substr(8 + n);
    return r;
  }
  std::string bytes() const {
    std::string h = header.dump();
    h.append((8 - h.size() % 8) % 8, ' ');
    return length_prefix(h.size()) + h + data;
  }
  static std::string length_prefix(uint64_t n) {
    std::string s;
    for (int i = 0; i < 8; ++i) s.push_back(char((n >> (8 * i)) & 0xffu));
    return s;
  }
  // The tensor whose data ends last.
  std::string last_tensor() const {
    std::string best;
    uint64_t end = 0;
    for (const auto& [k, v] : header.items())
      if (k != "__metadata__" && v["data_offsets"][1].get<uint64_t>() >= end) {
        end = v["data_offsets"][1].get<uint64_t>();
        best = k;
      }
    return best;
  }
};

TEST_F(CheckpointBadInput, TruncatedFile) {
  const std::string good = good_bytes(WeightFormat::int8);
  const RawFile raw = RawFile::parse(good);
  const std::string last = raw.last_tensor();
  expect_raw_rejected(good.substr(0, good.size() - 100),
                      {"'" + last + "'", "past the end of the", "data section"});
  expect_raw_rejected(good.substr(0, 5), {"5 bytes", "too short for the 8-byte header length"});
  expect_raw_rejected(good.substr(0, 8 + 40), {"header length", "runs past the end"});
}

TEST_F(CheckpointBadInput, HeaderLengthPastTheEnd) {
  const std::string good = good_bytes(WeightFormat::int8);
  std::string bad = good;
  const std::string len = RawFile::length_prefix(good.size());  // > file - 8
  bad.replace(0, 8, len);
  expect_raw_rejected(bad, {"header length " + std::to_string(good.size()), "runs past the end",
                            std::to_string(good.size()) + "-byte file"});
  bad.replace(0, 8, RawFile::length_prefix(std::numeric_limits<uint64_t>::max()));
  expect_raw_rejected(bad, {"runs past the end"});
}

TEST_F(CheckpointBadInput, HeaderIsNotJson) {
  const std::string good = good_bytes(WeightFormat::int8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(good[size_t(i)]);
  std::string bad = good;
  bad.replace(8, 12, "{not json!!!");
  expect_raw_rejected(bad, {"header is not valid JSON"});
  // Valid JSON, but not an object.
  std::string arr = "[1, 2, 3]";
  arr.append(n - arr.size(), ' ');
  bad.replace(8, n, arr);
  expect_raw_rejected(bad, {"header must be a JSON object", "array"});
}

TEST_F(CheckpointBadInput, UnknownDtype) {
  RawFile raw = RawFile::parse(good_bytes(WeightFormat::int8));
  raw.header["blocks.0.attn.qkv_proj.weight"]["dtype"] = "I4";
  expect_raw_rejected(raw.bytes(), {"tensor 'blocks.0.attn.qkv_proj.weight'", "unknown dtype 'I4'",
                                    "expected one of", "BF16"});
}

TEST_F(CheckpointBadInput, OverlappingOffsets) {
  RawFile raw = RawFile::parse(good_bytes(WeightFormat::int8));
  // Two tensors of the same size: norm2 made to share norm1's bytes.
  raw.header["blocks.0.norm2.weight"]["data_offsets"] =
      raw.header["blocks.0.norm1.weight"]["data_offsets"];
  expect_raw_rejected(raw.bytes(),
                      {"'blocks.0.norm1.weight'", "'blocks.0.norm2.weight'", "overlap"});
  // A partial overlap: shifted by two bytes into the next tensor.
  RawFile raw2 = RawFile::parse(good_bytes(WeightFormat::int8));
  auto& off = raw2.header["blocks.0.norm1.weight"]["data_offsets"];
  off = {off[0].get<uint64_t>() + 2, off[1].get<uint64_t>() + 2};
  expect_raw_rejected(raw2.bytes(), {"'blocks.0.norm1.weight'", "overlap"});
}

TEST_F(CheckpointBadInput, OffsetsOutOfRange) {
  RawFile raw = RawFile::parse(good_bytes(WeightFormat::int8));
  const uint64_t size = raw.data.size();
  raw.header["blocks.0.norm1.weight"]["data_offsets"] = {size - 2, size + 510};
  expect_raw_rejected(raw.bytes(), {"tensor 'blocks.0.norm1.weight'", "past the end of the",
                                    std::to_string(size) + "-byte data section"});
  raw.header["blocks.0.norm1.weight"]["data_offsets"] = {20, 10};
  expect_raw_rejected(raw.bytes(),
                      {"tensor 'blocks.0.norm1.weight'", "expected [begin, end] with 0 <= begin"});
  raw.header["blocks.0.norm1.weight"]["data_offsets"] = {-4, 508};
  expect_raw_rejected(raw.bytes(), {"tensor 'blocks.0.norm1.weight'", "data_offsets"});
}

TEST_F(CheckpointBadInput, ByteCountNotMatchingShapeTimesDtype) {
  RawFile raw = RawFile::parse(good_bytes(WeightFormat::int8));
  raw.header["blocks.0.norm1.weight"]["shape"] = {255};
  expect_raw_rejected(raw.bytes(),
                      {"tensor 'blocks.0.norm1.weight'", "512 bytes", "BF16", "needs 510"});
  RawFile raw2 = RawFile::parse(good_bytes(WeightFormat::int8));
  raw2.header["blocks.0.norm1.weight"]["dtype"] = "F32";
  expect_raw_rejected(raw2.bytes(), {"tensor 'blocks.0.norm1.weight'", "F32", "needs 1024"});
}

// ---- names and shapes ----------------------------------------------------------

TEST_F(CheckpointBadInput, MissingTensor) {
  Checkpoint c = good(WeightFormat::int8);
  c.drop("blocks.1.mlp.fc2.weight");
  expect_rejected(c, {"missing tensor 'blocks.1.mlp.fc2.weight'"});
  Checkpoint d = good(WeightFormat::int8);
  d.drop("blocks.1.mlp.fc2.weight_scale");
  expect_rejected(d, {"missing tensor 'blocks.1.mlp.fc2.weight_scale'"});
  Checkpoint e = good(WeightFormat::int8);
  e.drop("final_layer.audio_out.bias");
  expect_rejected(e, {"missing tensor 'final_layer.audio_out.bias'"});
}

TEST_F(CheckpointBadInput, ExtraTensor) {
  Checkpoint c = good(WeightFormat::int8);
  c.tensors.push_back({"blocks.0.extra.weight", "BF16", {4}, std::vector<std::byte>(8)});
  expect_rejected(c, {"unexpected tensor 'blocks.0.extra.weight'", "2 blocks"});
  // ComfyUI's per-layer attention config (upstream's ComfyAttention saves it as
  // JSON bytes) is not h3stream's: ignored, the file loads.
  Checkpoint d = good(WeightFormat::int8);
  const std::vector<std::byte> json = text_bytes(R"({"attention": "comfy_kitchen_int8"})");
  d.tensors.push_back({"blocks.1.attn.comfy_attention.config", "U8", {int64_t(json.size())}, json});
  const std::string path = bad_path();
  d.write(path);
  EXPECT_NO_THROW((void)load_checkpoint(path));
}

TEST_F(CheckpointBadInput, WrongShape) {
  // qkv with one row too many (int8: one more row of 256 bytes + one scale).
  for (const std::string block : {"blocks.1.", "token_refiner.blocks.0."}) {
    Checkpoint c = good(WeightFormat::int8);
    Owned& w = c.at(block + "attn.qkv_proj.weight");
    w.shape = {769, 256};
    w.data.resize(769 * 256);
    expect_rejected(c, {"tensor '" + block + "attn.qkv_proj.weight'", "has shape [769, 256]",
                        "expected [768, 256]"});
  }
  // In block 0 the config is detected from it: 769 is not 3 x heads x 128.
  Checkpoint c = good(WeightFormat::int8);
  Owned& w = c.at("blocks.0.attn.qkv_proj.weight");
  w.shape = {769, 256};
  w.data.resize(769 * 256);
  expect_rejected(c, {"blocks.0.attn.qkv_proj", "769", "3 x heads x head_dim"});
  // A scale of the wrong length.
  Checkpoint s = good(WeightFormat::int8);
  Owned& sc = s.at("blocks.1.mlp.fc1.weight_scale");
  sc.shape = {511, 1};
  sc.data.resize(511 * 4);
  expect_rejected(s, {"tensor 'blocks.1.mlp.fc1.weight_scale'", "[511, 1]", "expected [512, 1]"});
  // A norm of the wrong length.
  Checkpoint n = good(WeightFormat::int8);
  Owned& nw = n.at("blocks.1.norm2.weight");
  nw.shape = {255};
  nw.data.resize(510);
  expect_rejected(n, {"tensor 'blocks.1.norm2.weight'", "[255]", "expected [256]"});
}

TEST_F(CheckpointBadInput, WrongDtype) {
  // An int8 weight stored as F32 (values converted) while comfy_quant says int8.
  Checkpoint c = good(WeightFormat::int8);
  Owned& w = c.at("blocks.0.attn.qkv_proj.weight");
  std::vector<float> f(w.data.size());
  for (size_t i = 0; i < f.size(); ++i) f[i] = float(std::to_integer<int8_t>(w.data[i]));
  w.dtype = "F32";
  w.data = as_bytes(f);
  expect_rejected(c, {"tensor 'blocks.0.attn.qkv_proj.weight'", "dtype F32", "expected I8"});
  // The same in a later block (past config detection).
  Checkpoint d = good(WeightFormat::int8);
  Owned& w1 = d.at("blocks.1.mlp.fc2.weight");
  w1.dtype = "U8";
  expect_rejected(d, {"tensor 'blocks.1.mlp.fc2.weight'", "dtype U8", "expected I8"});
  // An nvfp4 block scale stored as I8.
  Checkpoint e = good(WeightFormat::nvfp4);
  Owned& s = e.at("blocks.1.mlp.fc1.weight_scale");
  s.dtype = "I8";
  expect_rejected(e,
                  {"tensor 'blocks.1.mlp.fc1.weight_scale'", "dtype I8", "expected F8_E4M3 or U8"});
  // A quantised fp32 island.
  Checkpoint g = good(WeightFormat::int8);
  const std::string j = comfy_quant_json(WeightFormat::int8);
  g.tensors.push_back(
      {"final_layer.video_out.comfy_quant", "U8", {int64_t(j.size())}, text_bytes(j)});
  expect_rejected(g, {"final_layer.video_out", "fp32 island"});
}

// ---- scales ---------------------------------------------------------------------

void set_f32(Owned& o, size_t i, float v) {
  ASSERT_EQ(o.dtype, "F32");
  ASSERT_LT(4 * i + 4, o.data.size() + 1);
  std::memcpy(o.data.data() + 4 * i, &v, 4);
}

TEST_F(CheckpointBadInput, NonFiniteScales) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  struct Case {
    WeightFormat format;
    std::string tensor;
    size_t index;
    float value;
    std::string shown;
  };
  const std::vector<Case> cases = {
      {WeightFormat::int8, "blocks.1.mlp.fc1.weight_scale", 5, nan, "nan"},
      {WeightFormat::int8, "blocks.1.mlp.fc1.weight_scale", 0, inf, "inf"},
      {WeightFormat::int8, "blocks.0.attn.out_proj.weight_scale", 3, -inf, "-inf"},
      {WeightFormat::int8, "blocks.0.attn.out_proj.weight_scale", 7, 0.0f, "0"},
      {WeightFormat::w4a8, "blocks.1.attn.qkv_proj.weight_s_channel", 9, nan, "nan"},
      {WeightFormat::w4a8, "token_refiner.blocks.0.mlp.fc2.weight_s_channel", 0, inf, "inf"},
      {WeightFormat::nvfp4, "blocks.1.mlp.fc2.weight_scale_2", 0, nan, "nan"},
      {WeightFormat::nvfp4, "blocks.0.mlp.fc1.weight_scale_2", 0, inf, "inf"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.tensor + " = " + k.shown);
    Checkpoint c = good(k.format);
    set_f32(c.at(k.tensor), k.index, k.value);
    expect_rejected(
        c, {"tensor '" + k.tensor + "'", "element " + std::to_string(k.index) + " is " + k.shown,
            "expected a finite positive scale"});
  }
  // e4m3 NaN codes (0x7f, 0xff) in the W4A8 group scales and NVFP4 block scales.
  for (const uint8_t code : {uint8_t(0x7f), uint8_t(0xff)}) {
    Checkpoint w = good(WeightFormat::w4a8);
    w.at("blocks.1.mlp.fc2.weight_s_rel").data[17] = std::byte{code};
    expect_rejected(w, {"tensor 'blocks.1.mlp.fc2.weight_s_rel'", "element 17 is NaN",
                        "expected a finite scale"});
    Checkpoint n = good(WeightFormat::nvfp4);
    n.at("blocks.1.attn.out_proj.weight_scale").data[3] = std::byte{code};
    expect_rejected(n, {"tensor 'blocks.1.attn.out_proj.weight_scale'", "element 3 is NaN",
                        "expected a finite scale"});
  }
  // A non-finite codebook level and bias.
  Checkpoint cb = good(WeightFormat::w4a8);
  std::vector<float> levels(16);
  for (int i = 0; i < 16; ++i) levels[size_t(i)] = float(i - 8);
  levels[4] = nan;
  cb.tensors.push_back({"blocks.1.mlp.fc1.weight_codebook", "F32", {16}, as_bytes(levels)});
  expect_rejected(cb, {"tensor 'blocks.1.mlp.fc1.weight_codebook'", "element 4 is nan",
                       "expected a finite scale"});
  Checkpoint b = good(WeightFormat::int8);
  set_f32(b.at("final_layer.video_out.bias"), 2, inf);
  expect_rejected(b, {"tensor 'final_layer.video_out.bias'", "element 2 is not finite"});
}

// ---- the per-layer quant config ---------------------------------------------------

TEST_F(CheckpointBadInput, BadComfyQuantJson) {
  const std::string layer = "blocks.1.mlp.fc1";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"{\"format\": \"int8_tensorwise\"", {"is not JSON"}},
      {"not json at all", {"is not JSON"}},
      {"[\"int8_tensorwise\"]", {"must be a JSON object", "array"}},
      {"\"int8_tensorwise\"", {"must be a JSON object", "string"}},
      {R"({"convrot": true})", {"no \"format\" string"}},
      {R"({"format": 8})", {"no \"format\" string"}},
      {R"({"format": "mxfp8"})", {"\"mxfp8\" is not supported", "int8_tensorwise"}},
      {R"({"format": "int8_tensorwise"})", {"without convrot is not supported"}},
      {R"({"format": "int8_tensorwise", "convrot": false})", {"without convrot"}},
      {R"({"format": "int8_tensorwise", "convrot": "yes"})", {"\"convrot\" must be true or false"}},
      {R"({"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 128})",
       {"convrot_groupsize 128 is not supported", "expected 256"}},
      {R"({"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 2.5})",
       {"\"convrot_groupsize\" must be an integer"}},
      {R"({"format": "int8_tensorwise", "convrot": true, "full_precision_matrix_mult": 1})",
       {"\"full_precision_matrix_mult\" must be true or false", "found 1"}},
  };
  for (const auto& [json, needles] : cases) {
    SCOPED_TRACE(json);
    Checkpoint c = good(WeightFormat::int8);
    Owned& q = c.at(layer + ".comfy_quant");
    q.data = text_bytes(json);
    q.shape = {int64_t(json.size())};
    std::vector<std::string> all = needles;
    all.push_back(layer);
    expect_rejected(c, all);
  }
  // A W4A8 layer with another group size.
  Checkpoint w = good(WeightFormat::w4a8);
  const std::string j = R"({"format": "asym_w4a8_int8", "group_size": 32})";
  Owned& q = w.at("blocks.1.attn.out_proj.comfy_quant");
  q.data = text_bytes(j);
  q.shape = {int64_t(j.size())};
  expect_rejected(w, {"blocks.1.attn.out_proj", "group_size 32", "expected 16"});
  // The comfy_quant tensor itself 2-D.
  Checkpoint d = good(WeightFormat::int8);
  Owned& q2 = d.at(layer + ".comfy_quant");
  q2.shape = {1, int64_t(q2.data.size())};
  expect_rejected(d, {"tensor '" + layer + ".comfy_quant'", "1-D"});
}

TEST_F(CheckpointBadInput, BadQuantizationMetadata) {
  Checkpoint c = good(WeightFormat::int8);
  c.metadata["_quantization_metadata"] = "{layers: nope";
  expect_rejected(c, {"_quantization_metadata is not JSON"});
  Checkpoint d = good(WeightFormat::int8);
  d.metadata["_quantization_metadata"] = R"({"format_version": "1.0"})";
  expect_rejected(d, {"_quantization_metadata", "\"layers\" object"});
  // A header-form layer entry with an unknown format.
  Checkpoint e = good(WeightFormat::int8);
  e.drop("blocks.1.mlp.fc2.comfy_quant");
  e.metadata["_quantization_metadata"] = R"({"layers": {"blocks.1.mlp.fc2": {"format": "fp8"}}})";
  expect_rejected(e, {"blocks.1.mlp.fc2", "\"fp8\" is not supported"});
}

// ---- not an H3 model we run ----------------------------------------------------------

TEST_F(CheckpointBadInput, PddHeadBank) {
  Checkpoint c = good(WeightFormat::int8);
  Owned& w = c.at("final_layer.video_out.weight");
  ASSERT_EQ(w.shape, (std::vector<int64_t>{96, 256}));
  w.shape = {2 * 96, 256};
  w.data.resize(2 * w.data.size());
  Owned& b = c.at("final_layer.video_out.bias");
  b.shape = {2 * 96};
  b.data.resize(2 * b.data.size());
  expect_rejected(
      c, {"final_layer.video_out", "192 rows", "PDD head bank of 2 heads", "expected 96 rows"});
  // Rows that are no multiple of the features.
  Checkpoint d = good(WeightFormat::int8);
  Owned& w2 = d.at("final_layer.video_out.weight");
  w2.shape = {100, 256};
  w2.data.resize(100 * 256 * 4);
  expect_rejected(d, {"final_layer.video_out", "100 rows", "expected 96"});
}

TEST_F(CheckpointBadInput, NotAnH3File) {
  Checkpoint c = good(WeightFormat::int8);
  c.drop("video_patch_proj.weight");
  c.drop("video_patch_proj.bias");
  expect_rejected(c, {"not a MiniMax-H3 checkpoint", "video_patch_proj.weight"});
  Checkpoint other;
  other.tensors.push_back({"encoder.layer.0.weight", "F32", {2, 2}, std::vector<std::byte>(16)});
  other.metadata["format"] = "pt";
  expect_rejected(other, {"not a MiniMax-H3 checkpoint", "video_patch_proj.weight"});
  Checkpoint empty;
  expect_rejected(empty, {"not a MiniMax-H3 checkpoint"});
  Checkpoint d = good(WeightFormat::int8);
  d.drop("audio_patch_proj.weight");
  expect_rejected(d, {"not a MiniMax-H3 checkpoint", "audio_patch_proj.weight"});
}

TEST_F(CheckpointBadInput, DegenerateShapes) {
  // Zero video features (an empty but well-formed tensor) must not divide by zero.
  Checkpoint c = good(WeightFormat::int8);
  Owned& w = c.at("video_patch_proj.weight");
  w.shape = {256, 0};
  w.data.clear();
  expect_rejected(c, {"video_patch_proj.weight", "0 input features"});
  // No blocks at all.
  Checkpoint d = good(WeightFormat::int8);
  std::erase_if(d.tensors,
                [](const Owned& o) { return o.name.find("blocks.") != std::string::npos; });
  expect_rejected(d, {"no 'blocks.N.'"});
  // A 1-D weight.
  Checkpoint e = good(WeightFormat::int8);
  Owned& q = e.at("blocks.0.attn.qkv_proj.weight");
  q.shape = {768 * 256};
  expect_rejected(e, {"blocks.0.attn.qkv_proj.weight", "must be 2-D"});
}

TEST_F(CheckpointBadInput, BlocksNumberedWithAGap) {
  Checkpoint c = good(WeightFormat::int8);
  for (Owned& o : c.tensors)
    if (o.name.rfind("blocks.1.", 0) == 0) o.name = "blocks.2." + o.name.substr(9);
  expect_rejected(c, {"'blocks.2.'", "'blocks.1.'", "without gaps"});
  // An index too large for any integer is a gap too, not a crash.
  Checkpoint d = good(WeightFormat::int8);
  d.tensors.push_back({"blocks.123456789012345678901234567890.norm1.weight",
                       "BF16",
                       {256},
                       std::vector<std::byte>(512)});
  expect_rejected(d, {"blocks.123456789012345678901234567890."});
}

}  // namespace
}  // namespace h3s::test
