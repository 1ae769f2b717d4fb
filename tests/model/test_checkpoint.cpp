// ComfyUI-format H3 checkpoints: write -> load round trips for every weight
// format and time form (plain, prefixed and header-metadata forms), forwards
// from a loaded file, the comfy-kitchen W4A8 / int8 golden weights decoded
// through the loader, the NVFP4 decode by hand, and (with H3S_PYTHON) interop
// with the Python `safetensors` package.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "checkpoint_entries.hpp"
#include "cli/cli_run.hpp"
#include "core/error.hpp"
#include "exec/exec_fixture.hpp"
#include "exec/forward.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_keys.hpp"
#include "model/safetensors.hpp"
#include "ops/golden_file.hpp"
#include "temp_dir.hpp"

namespace h3s::test {
namespace {

namespace fs = std::filesystem;

using test::TempDir;

// Bitwise equality of two host arrays (vectors or WeightArrays) of one element type.
template <class A, class B>
::testing::AssertionResult same_bits(const A& a, const B& b) {
  static_assert(sizeof(*std::data(a)) == sizeof(*std::data(b)));
  constexpr size_t kElem = sizeof(*std::data(a));
  if (std::size(a) != std::size(b))
    return ::testing::AssertionFailure() << "sizes " << std::size(a) << " vs " << std::size(b);
  for (size_t i = 0; i < std::size(a); ++i)
    if (std::memcmp(std::data(a) + i, std::data(b) + i, kElem) != 0)
      return ::testing::AssertionFailure() << "first difference at element " << i;
  return ::testing::AssertionSuccess();
}

void expect_same_linear(const QuantLinear& a, const QuantLinear& b, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(a.format, b.format);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.in, b.in);
  // NVFP4 loads packed (the backend decodes at prepare): compare the decodes.
  if (a.format == WeightFormat::nvfp4)
    EXPECT_TRUE(same_bits(decode_nvfp4_values(a), decode_nvfp4_values(b))) << "nvfp4 decode";
  else
    EXPECT_TRUE(same_bits(a.w_bf16, b.w_bf16)) << "w_bf16";
  EXPECT_TRUE(same_bits(a.w_f32, b.w_f32)) << "w_f32";
  // W4A8 loads packed (the CPU backend decodes at prepare): compare the decodes.
  if (a.format == WeightFormat::w4a8)
    EXPECT_TRUE(same_bits(decode_w4a8_values(a), decode_w4a8_values(b))) << "w4a8 decode";
  else
    EXPECT_TRUE(same_bits(a.w_i8, b.w_i8)) << "w_i8";
  EXPECT_TRUE(same_bits(a.w_scale, b.w_scale)) << "w_scale";
  EXPECT_TRUE(same_bits(a.w4_codes, b.w4_codes)) << "w4_codes";
  EXPECT_TRUE(same_bits(a.w4_s_rel, b.w4_s_rel)) << "w4_s_rel";
  EXPECT_TRUE(same_bits(a.w4_codebook, b.w4_codebook)) << "w4_codebook";
  EXPECT_TRUE(same_bits(a.fp4_codes, b.fp4_codes)) << "fp4_codes";
  EXPECT_TRUE(same_bits(a.fp4_scales, b.fp4_scales)) << "fp4_scales";
  EXPECT_EQ(std::bit_cast<uint32_t>(a.fp4_global), std::bit_cast<uint32_t>(b.fp4_global))
      << "fp4_global";
  EXPECT_TRUE(same_bits(a.bias, b.bias)) << "bias";
}

// Every weight of `b` equals `a`'s bit for bit; the detected config equals
// `a`'s in every field the file determines.
void expect_same_weights(const ModelWeights& a_in, const ModelWeights& b_in) {
  ModelWeights& a = const_cast<ModelWeights&>(a_in);  // slots are only read
  ModelWeights& b = const_cast<ModelWeights&>(b_in);
  const ModelConfig &ca = a.config, &cb = b.config;
  EXPECT_EQ(cb.hidden, ca.hidden);
  EXPECT_EQ(cb.heads, ca.heads);
  EXPECT_EQ(cb.head_dim, ca.head_dim);
  EXPECT_EQ(cb.ffn, ca.ffn);
  EXPECT_EQ(cb.blocks, ca.blocks);
  EXPECT_EQ(cb.refiner_blocks, ca.refiner_blocks);
  EXPECT_EQ(cb.rope_dim, ca.rope_dim);
  EXPECT_EQ(cb.rope_freqs, ca.rope_freqs);
  EXPECT_EQ(cb.video_latent, ca.video_latent);
  EXPECT_EQ(cb.audio_latent, ca.audio_latent);
  EXPECT_EQ(cb.text_dim, ca.text_dim);
  EXPECT_EQ(cb.time_dim, ca.time_dim);
  EXPECT_EQ(cb.time_form, ca.time_form);
  EXPECT_EQ(cb.eps, ca.eps);
  if (ca.time_form == TimeForm::full) {
    EXPECT_EQ(cb.time_freq_dim, ca.time_freq_dim);
    EXPECT_EQ(cb.time_hidden, ca.time_hidden);
  } else {
    EXPECT_EQ(cb.curve_grid, ca.curve_grid);
  }
  EXPECT_EQ(b.format, a.format);
  ASSERT_EQ(b.blocks.size(), a.blocks.size());
  ASSERT_EQ(b.refiner.size(), a.refiner.size());
  const WeightSlots sa = weight_slots(a), sb = weight_slots(b);
  ASSERT_EQ(sa.linears.size(), sb.linears.size());
  for (size_t i = 0; i < sa.linears.size(); ++i) {
    ASSERT_EQ(sa.linears[i].name, sb.linears[i].name);
    expect_same_linear(*sa.linears[i].q, *sb.linears[i].q, sa.linears[i].name);
  }
  ASSERT_EQ(sa.norms.size(), sb.norms.size());
  for (size_t i = 0; i < sa.norms.size(); ++i)
    EXPECT_TRUE(same_bits(*sa.norms[i].v, *sb.norms[i].v)) << sa.norms[i].name;
  ASSERT_EQ(sa.buffers.size(), sb.buffers.size());
  for (size_t i = 0; i < sa.buffers.size(); ++i)
    EXPECT_TRUE(same_bits(*sa.buffers[i].v, *sb.buffers[i].v)) << sa.buffers[i].name;
}

ModelConfig config_for(TimeForm form) {
  ModelConfig c = micro_config();
  if (form == TimeForm::curve) {
    c.time_form = TimeForm::curve;
    c.time_dim = 8;
  }
  return c;
}

std::string param_name(WeightFormat f, TimeForm t) {
  return std::string(format_name(f)) + (t == TimeForm::full ? "_full" : "_curve");
}

// ---- 1. round trips ---------------------------------------------------------

class CheckpointRoundTrip : public ::testing::TestWithParam<std::tuple<WeightFormat, TimeForm>> {};

TEST_P(CheckpointRoundTrip, EveryFieldBitIdenticalPlainAndPrefixed) {
  const auto [format, form] = GetParam();
  const ModelWeights w = ModelWeights::random(config_for(form), format, 4242);
  TempDir dir;
  const std::string path = dir.file("plain.safetensors");
  write_checkpoint(w, path, {{"note", "round trip"}});

  CheckpointSummary summary;
  const ModelWeights back = load_checkpoint(path, &summary);
  expect_same_weights(w, back);
  EXPECT_EQ(summary.prefix, "");
  EXPECT_EQ(int64_t(summary.linears.size()),
            int64_t(weight_slots(const_cast<ModelWeights&>(w)).linears.size()));
  const std::string qkv_format(format_name(back.blocks.at(0).attn.qkv.format));
  EXPECT_EQ(qkv_format, format_name(format));

  // The same tensors under ComfyUI's "model.diffusion_model." prefix.
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.metadata().at("note"), "round trip");
  std::vector<Owned> entries = read_entries(f);
  for (Owned& o : entries) o.name = "model.diffusion_model." + o.name;
  const std::string prefixed = dir.file("prefixed.safetensors");
  write_entries(prefixed, entries, f.metadata());
  CheckpointSummary ps;
  const ModelWeights pb = load_checkpoint(prefixed, &ps);
  EXPECT_EQ(ps.prefix, "model.diffusion_model.");
  expect_same_weights(w, pb);
  ASSERT_FALSE(ps.linears.empty());
  EXPECT_EQ(ps.linears[0].name.rfind("model.diffusion_model.", 0), 0u) << ps.linears[0].name;
}

INSTANTIATE_TEST_SUITE_P(
    , CheckpointRoundTrip,
    ::testing::Combine(::testing::Values(WeightFormat::bf16, WeightFormat::int8, WeightFormat::w4a8,
                                         WeightFormat::nvfp4),
                       ::testing::Values(TimeForm::full, TimeForm::curve)),
    [](const auto& p) { return param_name(std::get<0>(p.param), std::get<1>(p.param)); });

// ---- 1a. fp32 islands as ComfyUI's loader holds them ----------------------

// A file with any quantised layer loads through ComfyUI's mixed-precision ops,
// which hold every unquantised Linear parameter in bf16 (docs/H3_MODEL.md section
// 2): the loader rounds such a file's fp32 islands (and any F32 bias of a bf16
// layer) to bf16; a bf16 file keeps its islands in fp32.
TEST(CheckpointIslands, QuantisedFilesHoldIslandsAtBf16BfFilesKeepFp32) {
  for (WeightFormat format : {WeightFormat::bf16, WeightFormat::int8, WeightFormat::w4a8}) {
    SCOPED_TRACE(std::string(format_name(format)));
    ModelWeights w = ModelWeights::random(config_for(TimeForm::full), format, 4244);
    // Island values and a bias that bf16 cannot hold exactly.
    std::vector<float> patch = w.video_patch.w_f32.to_vector();
    for (size_t i = 0; i < patch.size(); ++i) patch[i] = 0.1f + float(i) * 1e-7f;
    w.video_patch.w_f32 = patch;
    std::vector<float> bias = w.condition_proj.bias.to_vector();
    bias[0] = 0.1f;  // not a bf16 value: written as F32
    w.condition_proj.bias = bias;
    TempDir dir;
    const std::string path = dir.file("islands.safetensors");
    write_checkpoint(w, path);
    CheckpointSummary summary;
    const ModelWeights back = load_checkpoint(path, &summary);
    const bool quantised = format != WeightFormat::bf16;
    ASSERT_EQ(back.video_patch.w_f32.size(), patch.size());
    size_t rounded = 0;
    for (size_t i = 0; i < patch.size(); ++i) {
      const float want = quantised ? round_bf16(patch[i]) : patch[i];
      ASSERT_EQ(std::bit_cast<uint32_t>(back.video_patch.w_f32[i]), std::bit_cast<uint32_t>(want))
          << i;
      rounded += back.video_patch.w_f32[i] != patch[i];
    }
    EXPECT_EQ(rounded > 0, quantised);  // the values really differ from the file's
    EXPECT_EQ(back.condition_proj.bias[0], round_bf16(0.1f));  // a bf16 layer's bias: bf16
    int held = 0;
    for (const CheckpointSummary::Layer& l : summary.linears) held += l.held_bf16;
    // Patch embeds, time embedder, output heads: six islands in the full form.
    EXPECT_EQ(held, quantised ? 6 : 0);
  }
}

// ---- 1b. lazy blocks: the model without its DiT blocks, then one block ------

TEST_P(CheckpointRoundTrip, SkippedBlocksThenOneBlockLoadIdentically) {
  const auto [format, form] = GetParam();
  const ModelWeights w = ModelWeights::random(config_for(form), format, 4243);
  ASSERT_GE(w.config.blocks, 2);
  TempDir dir;
  const std::string path = dir.file("lazy.safetensors");
  write_checkpoint(w, path);
  const SafetensorsFile f = SafetensorsFile::open(path);
  LoadOptions skip;
  skip.skip_dit_blocks = true;
  const ModelWeights lazy = load_checkpoint(f, nullptr, skip);
  ASSERT_EQ(lazy.blocks.size(), w.blocks.size());
  for (const BlockWeights& b : lazy.blocks) EXPECT_EQ(b.attn.qkv.out, 0);  // left empty
  EXPECT_EQ(format_name(lazy.format), format_name(format));
  expect_same_linear(w.final_layer.video_out, lazy.final_layer.video_out, "final video_out");

  // Block 1 alone, from a file holding only that block's tensors (prefixed, as
  // a framework's state dict of the whole model would name them).
  std::vector<Owned> only;
  for (Owned& o : read_entries(f))
    if (o.name.rfind("blocks.1.", 0) == 0) {
      o.name = "model.diffusion_model." + o.name;
      only.push_back(std::move(o));
    }
  const std::string one = dir.file("block1.safetensors");
  write_entries(one, only, {});
  const BlockWeights b1 = load_dit_block(SafetensorsFile::open(one), lazy.config, 1);
  expect_same_linear(w.blocks[1].attn.qkv, b1.attn.qkv, "blocks.1 qkv");
  expect_same_linear(w.blocks[1].mlp.fc2, b1.mlp.fc2, "blocks.1 fc2");
  expect_same_linear(w.blocks[1].adaln, b1.adaln, "blocks.1 adaln");
  EXPECT_TRUE(same_bits(w.blocks[1].norm2, b1.norm2));

  // The wrong index, or a stray tensor, is refused naming the problem.
  try {
    (void)load_dit_block(SafetensorsFile::open(one), lazy.config, 0);
    FAIL() << "block 1's tensors were accepted as block 0";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no tensor of block 0"), std::string::npos) << e.what();
  }
  try {
    (void)load_dit_block(f, lazy.config, 1);  // the whole file: other blocks are strays
    FAIL() << "a file with other blocks' tensors was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not part of DiT block 1"), std::string::npos) << e.what();
  }
}

// ---- 2. header `_quantization_metadata` instead of comfy_quant tensors -------

TEST(CheckpointHeaderQuant, Int8FromQuantizationMetadataLoadsIdentically) {
  const ModelWeights w = ModelWeights::random(micro_config(), WeightFormat::int8, 99);
  TempDir dir;
  const std::string path = dir.file("int8.safetensors");
  write_checkpoint(w, path);
  const SafetensorsFile f = SafetensorsFile::open(path);
  std::vector<Owned> kept;
  nlohmann::json layers = nlohmann::json::object();
  const std::string suffix = ".comfy_quant";
  for (Owned& o : read_entries(f)) {
    if (o.name.size() > suffix.size() &&
        o.name.compare(o.name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      layers[o.name.substr(0, o.name.size() - suffix.size())] = {
          {"format", "int8_tensorwise"}, {"convrot", true}, {"convrot_groupsize", 256}};
    } else {
      kept.push_back(std::move(o));
    }
  }
  // Four block linears in each of 2 blocks and 1 refiner block.
  ASSERT_EQ(layers.size(), 12u);
  std::map<std::string, std::string> md = f.metadata();
  md["_quantization_metadata"] =
      nlohmann::json{{"format_version", "1.0"}, {"layers", layers}}.dump();
  const std::string header_form = dir.file("header_form.safetensors");
  write_entries(header_form, kept, md);
  EXPECT_FALSE(SafetensorsFile::open(header_form).contains("blocks.0.attn.qkv_proj.comfy_quant"));
  expect_same_weights(w, load_checkpoint(header_form));

  // Prefixed keys, with the layer names in the metadata prefixed too.
  for (Owned& o : kept) o.name = "model.diffusion_model." + o.name;
  nlohmann::json prefixed_layers = nlohmann::json::object();
  for (const auto& [k, v] : layers.items()) prefixed_layers["model.diffusion_model." + k] = v;
  md["_quantization_metadata"] =
      nlohmann::json{{"format_version", "1.0"}, {"layers", prefixed_layers}}.dump();
  const std::string prefixed = dir.file("header_form_prefixed.safetensors");
  write_entries(prefixed, kept, md);
  expect_same_weights(w, load_checkpoint(prefixed));
}

// ---- 2b. layers flagged full_precision_matrix_mult ----------------------------

std::vector<float> forward_video(const ModelWeights& w, const PackedLayout& l,
                                 const ExecOptions& o) {
  HostMemory mem;
  Arena arena(mem, 0);
  auto be = make_cpu_backend(2);
  return run_forward(*be, arena, w, l, random_inputs(w.config, l, 5), o).video;
}

// ComfyUI dequantises such a layer and multiplies in bf16: it loads as the
// bf16 layer dequantise_convrot_bf16 makes, the rest of its block stays
// quantised, and the mixed block streams bit-equal to its stock run.
class CheckpointFullPrecision : public ::testing::TestWithParam<WeightFormat> {};

TEST_P(CheckpointFullPrecision, FlaggedLayersLoadAsTheirBf16Dequantisation) {
  const WeightFormat format = GetParam();
  const ModelWeights w = ModelWeights::random(micro_config(), format, 31);
  TempDir dir;
  const std::string base = dir.file("base.safetensors");
  write_checkpoint(w, base);
  const SafetensorsFile f = SafetensorsFile::open(base);
  std::vector<Owned> entries = read_entries(f);
  const std::string quant = comfy_quant_json(format);
  nlohmann::json flagged = nlohmann::json::parse(quant);
  flagged["full_precision_matrix_mult"] = true;
  for (const char* layer : {"blocks.0.mlp.fc2", "blocks.1.attn.qkv_proj"}) {
    Owned& q = entry_named(entries, std::string(layer) + ".comfy_quant");
    const std::string text = flagged.dump();
    set_text(q, text);
  }
  // An explicit false changes nothing.
  Owned& unflagged = entry_named(entries, "blocks.1.mlp.fc1.comfy_quant");
  nlohmann::json off = nlohmann::json::parse(quant);
  off["full_precision_matrix_mult"] = false;
  const std::string off_text = off.dump();
  set_text(unflagged, off_text);
  const std::string path = dir.file("flagged.safetensors");
  write_entries(path, entries, f.metadata());

  CheckpointSummary summary;
  const ModelWeights loaded = load_checkpoint(path, &summary);
  ModelWeights want = w;
  for (QuantLinear* q : {&want.blocks[0].mlp.fc2, &want.blocks[1].attn.qkv}) {
    QuantLinear dense;
    dense.out = q->out;
    dense.in = q->in;
    dense.w_bf16 = dequantise_convrot_bf16(*q);
    dense.bias = q->bias;
    *q = std::move(dense);
  }
  expect_same_weights(want, loaded);
  EXPECT_EQ(loaded.blocks[1].mlp.fc1.format, format);
  int flagged_layers = 0;
  for (const auto& l : summary.linears) {
    if (!l.full_precision) continue;
    ++flagged_layers;
    EXPECT_EQ(l.format, format) << l.name;
    EXPECT_TRUE(l.name == "blocks.0.mlp.fc2" || l.name == "blocks.1.attn.qkv_proj") << l.name;
  }
  EXPECT_EQ(flagged_layers, 2);
  // h3s inspect names them for what they are.
  const cli_test::Result r = cli_test::run_cli("inspect --json --layers " + path, false);
  ASSERT_EQ(r.code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const std::string held = std::string(format_name(format)) + " (bf16 GEMM)";
  EXPECT_EQ(j.at("linear_formats").at(held).at("layers"), 2) << r.out;
  int listed = 0;
  for (const nlohmann::json& layer : j.at("layers"))
    if (layer.at("full_precision_matrix_mult").get<bool>()) {
      ++listed;
      EXPECT_EQ(layer.at("format"), format_name(format)) << layer.dump();
      EXPECT_EQ(layer.at("held_as"), "bf16") << layer.dump();
    }
  EXPECT_EQ(listed, 2) << r.out;

  // A bf16 fc2 after a quantised fc1 (and the reverse in block 1's attention).
  const PackedLayout l = small_layout(loaded.config, 9, 4, 13, true, true);
  const std::vector<float> stock = forward_video(loaded, l, ExecOptions::stock());
  EXPECT_TRUE(same_bits(forward_video(loaded, l, streamed_options(7, 11, 5)), stock));
  for (float v : stock) ASSERT_TRUE(std::isfinite(v));
  // And it is not the quantised layer's forward.
  EXPECT_FALSE(same_bits(forward_video(w, l, ExecOptions::stock()), stock));
}

// The same flagged layers handed over in device memory (how the Python module
// passes a framework's GPU tensors: SafetensorsFile::from_entries with a
// DeviceReader) are refused, naming the layer and the fix: h3stream dequantises a flagged layer on
// the host, so the host must hand over that layer's bf16 weight. The rest of such a model loads as
// views.
TEST_P(CheckpointFullPrecision, FlaggedLayersInDeviceMemoryAreRefusedNamingTheFix) {
  const WeightFormat format = GetParam();
  const ModelWeights w = ModelWeights::random(micro_config(), format, 32);
  TempDir dir;
  const std::string base = dir.file("base.safetensors");
  write_checkpoint(w, base);
  const SafetensorsFile f = SafetensorsFile::open(base);
  std::vector<Owned> entries = read_entries(f);
  nlohmann::json flagged = nlohmann::json::parse(comfy_quant_json(format));
  flagged["full_precision_matrix_mult"] = true;
  const std::string text = flagged.dump();
  Owned& q = entry_named(entries, "blocks.1.mlp.fc2.comfy_quant");
  set_text(q, text);
  // Every DiT block weight "in device memory" (host bytes tagged as device:
  // the loader may only view them or read them through `read`).
  auto handed_over = [&](bool weights_on_device) {
    std::vector<TensorEntry> te;
    for (const Owned& o : entries) {
      TensorEntry e;
      e.name = o.name;
      e.dtype = o.dtype;
      e.shape = o.shape;
      e.data = o.data.data();
      e.bytes = o.data.size();
      const bool block_weight = o.name.rfind("blocks.", 0) == 0 && o.name.ends_with(".weight");
      e.device = weights_on_device && block_weight ? Device::cuda : Device::host;
      te.push_back(std::move(e));
    }
    return SafetensorsFile::from_entries(
        std::move(te), f.metadata(), "handed-over",
        [](const TensorEntry& e, void* dst) { std::memcpy(dst, e.data, e.bytes); });
  };
  LoadOptions options;
  options.keep_alive = std::make_shared<int>(0);
  // On the host the flagged layer loads (as its bf16 dequantisation).
  EXPECT_EQ(load_checkpoint(handed_over(false), nullptr, options).blocks[1].mlp.fc2.format,
            WeightFormat::bf16);
  try {
    load_checkpoint(handed_over(true), nullptr, options);
    ADD_FAILURE() << "a flagged layer in device memory loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::bad_input);
    const std::string msg = e.what();
    for (const char* want : {"handed-over", "blocks.1.mlp.fc2", "full_precision_matrix_mult",
                             "in device memory", "bf16 weight", "weight.dequantize()"})
      EXPECT_NE(msg.find(want), std::string::npos) << want << " missing from: " << msg;
  }
  // Without the flag the same device-memory model loads, its weights viewed.
  Owned& q2 = entry_named(entries, "blocks.1.mlp.fc2.comfy_quant");
  const std::string plain = comfy_quant_json(format);
  set_text(q2, plain);
  const ModelWeights loaded = load_checkpoint(handed_over(true), nullptr, options);
  EXPECT_EQ(loaded.blocks[1].mlp.fc2.format, format);
  EXPECT_EQ(format == WeightFormat::int8 ? loaded.blocks[1].mlp.fc2.w_i8.device()
                                         : loaded.blocks[1].mlp.fc2.w4_codes.device(),
            Device::cuda);
}

INSTANTIATE_TEST_SUITE_P(, CheckpointFullPrecision,
                         ::testing::Values(WeightFormat::int8, WeightFormat::w4a8),
                         [](const auto& p) { return std::string(format_name(p.param)); });

// ---- 3. a forward from a written file equals the in-memory forward ----------

std::vector<float> forward_video_audio(const ModelWeights& w, const PackedLayout& l,
                                       std::vector<float>* audio) {
  HostMemory mem;
  Arena arena(mem, 0);
  auto be = make_cpu_backend(2);
  const ForwardInputs in = random_inputs(w.config, l, 5);
  ForwardOutputs o = run_forward(*be, arena, w, l, in, ExecOptions::stock());
  *audio = std::move(o.audio);
  return std::move(o.video);
}

class CheckpointForward : public ::testing::TestWithParam<std::tuple<WeightFormat, TimeForm>> {};

TEST_P(CheckpointForward, FromFileEqualsInMemoryBitForBit) {
  const auto [format, form] = GetParam();
  const ModelWeights w = ModelWeights::random(config_for(form), format, 777);
  TempDir dir;
  const std::string path = dir.file("fwd.safetensors");
  write_checkpoint(w, path);
  const ModelWeights loaded = load_checkpoint(path);
  const PackedLayout l = small_layout(w.config, 9, 4, 13, true, true);
  std::vector<float> audio_mem, audio_file;
  const std::vector<float> video_mem = forward_video_audio(w, l, &audio_mem);
  const std::vector<float> video_file = forward_video_audio(loaded, l, &audio_file);
  ASSERT_EQ(int64_t(video_mem.size()), 13 * w.config.video_features());
  ASSERT_FALSE(audio_mem.empty());
  EXPECT_TRUE(same_bits(video_mem, video_file));
  EXPECT_TRUE(same_bits(audio_mem, audio_file));
  for (float v : video_mem) ASSERT_TRUE(std::isfinite(v));
}

INSTANTIATE_TEST_SUITE_P(, CheckpointForward,
                         ::testing::Values(std::tuple{WeightFormat::bf16, TimeForm::full},
                                           std::tuple{WeightFormat::int8, TimeForm::full},
                                           std::tuple{WeightFormat::w4a8, TimeForm::full},
                                           std::tuple{WeightFormat::nvfp4, TimeForm::full},
                                           std::tuple{WeightFormat::int8, TimeForm::curve}),
                         [](const auto& p) {
                           return param_name(std::get<0>(p.param), std::get<1>(p.param));
                         });

// ---- 4. comfy-kitchen golden weights through the loader ----------------------

SafetensorsFile golden(const std::string& stem) {
  return SafetensorsFile::open(test::golden_path(stem));
}

// fp8 e4m3fn decoded by hand: bias 7, subnormals below exponent 1.
float e4m3_by_hand(uint8_t v) {
  const int e = (v >> 3) & 0xf, m = v & 7;
  const float mag =
      e == 0 ? float(m) * std::ldexp(1.0f, -9) : (1.0f + float(m) / 8.0f) * std::ldexp(1.0f, e - 7);
  return (v & 0x80) ? -mag : mag;
}

Tensor bf16_matrix(std::vector<uint16_t>& v, int64_t rows, int64_t cols) {
  return Tensor::contiguous(v.data(), DType::bf16, {rows, cols});
}

TEST(CheckpointGolden, W4A8LayerDecodesLikeComfyKitchen) {
  // hidden 256 x 4 heads of 128: out_proj is [256, 512] like the golden layer.
  ModelConfig c = micro_config();
  c.heads = 4;
  const ModelWeights w = ModelWeights::random(c, WeightFormat::w4a8, 3);
  ASSERT_EQ(w.blocks[0].attn.out.out, 256);
  ASSERT_EQ(w.blocks[0].attn.out.in, 512);
  TempDir dir;
  const std::string base = dir.file("base.safetensors");
  write_checkpoint(w, base);
  const SafetensorsFile g = golden("ck_w4a8_linear");
  std::vector<Owned> entries = read_entries(SafetensorsFile::open(base));
  // cb into block 0's out_proj, nocb into block 1's.
  const std::pair<const char*, const char*> variants[] = {{"cb", "blocks.0.attn.out_proj"},
                                                          {"nocb", "blocks.1.attn.out_proj"}};
  for (const auto& [v, layer] : variants) {
    for (const char* t : {".weight", ".weight_s_rel", ".weight_s_channel"}) {
      Owned& o = entry_named(entries, std::string(layer) + t);
      const TensorEntry& e = g.entry(std::string(v) + t);
      ASSERT_EQ(o.shape, e.shape) << layer << t;
      o.dtype = e.dtype;
      o.data.assign(e.data, e.data + e.bytes);
    }
  }
  {
    const TensorEntry& e = g.entry("cb.weight_codebook");
    entries.push_back({"blocks.0.attn.out_proj.weight_codebook", e.dtype, e.shape,
                       std::vector<std::byte>(e.data, e.data + e.bytes)});
  }
  const std::string path = dir.file("golden_w4a8.safetensors");
  write_entries(path, entries, {});
  const ModelWeights loaded = load_checkpoint(path);

  auto be = make_cpu_backend(2);
  for (int i = 0; i < 2; ++i) {
    const std::string v = variants[i].first;
    SCOPED_TRACE(v);
    // Loaded packed; decoded as the CPU backend's prepare decodes it.
    QuantLinear q = loaded.blocks[size_t(i)].attn.out;
    ASSERT_EQ(q.format, WeightFormat::w4a8);
    ASSERT_TRUE(q.w_i8.empty());
    decode_w4a8(q);
    const std::vector<uint8_t> codes = g.read_as<uint8_t>(v + ".weight", "I8");
    const std::vector<uint8_t> s_rel = g.read_as<uint8_t>(v + ".weight_s_rel", "F8_E4M3");
    const std::vector<float> s_ch = g.read_as<float>(v + ".weight_s_channel", "F32");
    std::vector<float> codebook;
    if (v == "cb") codebook = g.read_as<float>("cb.weight_codebook", "F32");
    EXPECT_TRUE(same_bits(q.w4_codes, codes));
    EXPECT_TRUE(same_bits(q.w4_s_rel, s_rel));
    EXPECT_TRUE(same_bits(q.w_scale, s_ch));
    EXPECT_TRUE(same_bits(q.w4_codebook, codebook));

    // The decoded first 32 rows comfy-kitchen recorded.
    const std::vector<int8_t> want =
        g.read_as<int8_t>(v + ".weight_int8_decoded_first32rows", "I8");
    ASSERT_EQ(want.size(), size_t(32 * 512));
    EXPECT_TRUE(same_bits(std::vector<int8_t>(q.w_i8.begin(), q.w_i8.begin() + 32 * 512), want));

    // Every row by hand: even column in the LOW nibble,
    // w8 = clamp(rne(level * e4m3(s_rel[n, k / 16])), -127, 127).
    int64_t bad = 0, clamped = 0;
    for (int64_t n = 0; n < 256; ++n)
      for (int64_t k = 0; k < 512; ++k) {
        const uint8_t byte = codes[size_t(n * 256 + k / 2)];
        const int code = k % 2 == 0 ? byte & 0x0f : byte >> 4;
        const float level = codebook.empty() ? float(code - 8) : codebook[size_t(code)];
        const float prod = level * e4m3_by_hand(s_rel[size_t(n * 32 + k / 16)]);
        float w8 = std::nearbyint(prod);
        if (w8 > 127.0f || w8 < -127.0f) ++clamped;
        w8 = std::clamp(w8, -127.0f, 127.0f);
        if (q.w_i8[size_t(n * 512 + k)] != int8_t(w8) && bad++ < 5)
          ADD_FAILURE() << "w_i8[" << n << ", " << k << "] = " << int(q.w_i8[size_t(n * 512 + k)])
                        << ", by hand " << w8;
      }
    EXPECT_EQ(bad, 0);
    // A few entries of the first rows spelled out against the recorded decode.
    for (int64_t k : {0, 1, 2, 3, 16, 17, 510, 511}) {
      const uint8_t byte = codes[size_t(k / 2)];
      const int code = k % 2 == 0 ? byte & 0x0f : byte >> 4;
      const float level = codebook.empty() ? float(code - 8) : codebook[size_t(code)];
      const float w8 =
          std::clamp(std::nearbyint(level * e4m3_by_hand(s_rel[size_t(k / 16)])), -127.0f, 127.0f);
      EXPECT_EQ(int(want[size_t(k)]), int(w8)) << "row 0 column " << k;
    }

    // The loaded layer multiplies like comfy-kitchen's kernel.
    std::vector<uint16_t> x = g.read_as<uint16_t>(v + ".M9.x", "BF16"), y(9 * 256);
    be->linear(bf16_matrix(x, 9, 512), q, bf16_matrix(y, 9, 256));
    EXPECT_TRUE(same_bits(y, g.read_as<uint16_t>(v + ".M9.out", "BF16")));
  }
}

TEST(CheckpointGolden, Int8LayerLoadsLikeComfyKitchen) {
  // hidden 512 x 2 heads of 128: qkv is [768, 512] like the golden int8 layer.
  ModelConfig c = micro_config();
  c.hidden = 512;
  c.blocks = 1;
  const ModelWeights w = ModelWeights::random(c, WeightFormat::int8, 4);
  ASSERT_EQ(w.blocks[0].attn.qkv.out, 768);
  ASSERT_EQ(w.blocks[0].attn.qkv.in, 512);
  TempDir dir;
  const std::string base = dir.file("base.safetensors");
  write_checkpoint(w, base);
  const SafetensorsFile g = golden("ck_int8_linear");
  std::vector<Owned> entries = read_entries(SafetensorsFile::open(base));
  for (const char* t : {"weight", "weight_scale"}) {
    Owned& o = entry_named(entries, std::string("blocks.0.attn.qkv_proj.") + t);
    const TensorEntry& e = g.entry(t);
    ASSERT_EQ(o.shape, e.shape) << t;
    ASSERT_EQ(o.dtype, e.dtype) << t;
    o.data.assign(e.data, e.data + e.bytes);
  }
  const std::string path = dir.file("golden_int8.safetensors");
  write_entries(path, entries, {});
  const ModelWeights loaded = load_checkpoint(path);
  const QuantLinear& q = loaded.blocks[0].attn.qkv;
  ASSERT_EQ(q.format, WeightFormat::int8);
  EXPECT_TRUE(same_bits(q.w_i8, g.read_as<int8_t>("weight", "I8")));
  EXPECT_TRUE(same_bits(q.w_scale, g.read_as<float>("weight_scale", "F32")));
  auto be = make_cpu_backend(2);
  std::vector<uint16_t> x = g.read_as<uint16_t>("M5.x", "BF16"), y(5 * 768);
  be->linear(bf16_matrix(x, 5, 512), q, bf16_matrix(y, 5, 768));
  EXPECT_TRUE(same_bits(y, g.read_as<uint16_t>("M5.out", "BF16")));
}

// ---- 5. NVFP4 decode by hand --------------------------------------------------

float e2m1_by_hand(uint8_t code) {
  static constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (code & 8) ? -kMag[code & 7] : kMag[code & 7];
}

// cuBLAS's swizzled block-scale layout, spelled out.
int64_t swizzled(int64_t r, int64_t c, int64_t cols) {
  return ((r / 128) * (cols / 4) + c / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4;
}

// A tiny padded layer: out 20 -> 32 rows, in 40 -> 48 columns (3 blocks of 16,
// scale columns rounded to 4, scale rows to 128).
TEST(CheckpointNvfp4, DecodeByHandWithPaddingAndSwizzle) {
  QuantLinear q;
  q.format = WeightFormat::nvfp4;
  q.out = 20;
  q.in = 40;
  const int64_t np = 32, kp = 48, cols = 4;
  std::vector<uint8_t> codes(size_t(np * kp / 2), 0);
  for (int64_t n = 0; n < np; ++n)
    for (int64_t j = 0; j < kp / 2; ++j)
      codes[size_t(n * kp / 2 + j)] = uint8_t((((n + 2 * j) % 16) << 4) | ((3 * n + j) % 16));
  // Unused scale slots hold e4m3 NaN: a wrong offset would show as NaN.
  std::vector<uint8_t> scales(size_t(128 * cols), 0x7f);
  const uint8_t scale_codes[] = {0x38, 0x40, 0x3c, 0x30, 0x01, 0x7e, 0xb8, 0x44};
  for (int64_t n = 0; n < q.out; ++n)
    for (int64_t b = 0; b < 3; ++b)
      scales[size_t(swizzled(n, b, cols))] = scale_codes[(3 * n + b) % 8];
  q.fp4_codes = codes;
  q.fp4_scales = scales;
  q.fp4_global = 1.0f / 3.0f;
  decode_nvfp4(q);
  ASSERT_EQ(q.w_bf16.size(), size_t(20 * 40));
  for (int64_t n = 0; n < q.out; ++n)
    for (int64_t k = 0; k < q.in; ++k) {
      const uint8_t byte = q.fp4_codes[size_t(n * kp / 2 + k / 2)];
      const uint8_t code = k % 2 == 0 ? uint8_t(byte >> 4) : uint8_t(byte & 0x0f);  // even: HIGH
      const float s = e4m3_by_hand(scale_codes[(3 * n + k / 16) % 8]);
      const float want = e2m1_by_hand(code) * (s * q.fp4_global);
      ASSERT_EQ(q.w_bf16[size_t(n * q.in + k)], f32_to_bf16(want).bits) << n << ", " << k;
    }
  // Spelled-out values: row 0 byte 0 = 0x00 | 0x00 -> 0; row 1 byte 0: high
  // (1 + 0) % 16 = 1 (0.5), low 3 (1.5); scale of (1, 0) = code[3] = 0.5.
  EXPECT_EQ(q.w_bf16[size_t(1 * 40 + 0)], f32_to_bf16(0.5f * (0.5f * (1.0f / 3.0f))).bits);
  EXPECT_EQ(q.w_bf16[size_t(1 * 40 + 1)], f32_to_bf16(1.5f * (0.5f * (1.0f / 3.0f))).bits);
}

TEST(CheckpointNvfp4, ExactValuesAndScaleOffsetFormula) {
  QuantLinear q;
  q.format = WeightFormat::nvfp4;
  q.out = 16;
  q.in = 32;
  std::vector<uint8_t> codes(16 * 16, 0), scales(128 * 4, 0);
  codes[0] = 0x7f;                           // column 0: 6.0 (high nibble), column 1: -6.0
  codes[8] = 0x29;                           // column 16: 1.0, column 17: -0.5
  scales[size_t(swizzled(0, 0, 4))] = 0x40;  // 2.0
  scales[size_t(swizzled(0, 1, 4))] = 0x30;  // 0.5
  q.fp4_codes = std::move(codes);
  q.fp4_scales = std::move(scales);
  q.fp4_global = 0.5f;
  decode_nvfp4(q);
  EXPECT_EQ(q.w_bf16[0], 0x40c0);   // 6 * 0.5 * 2 = 6
  EXPECT_EQ(q.w_bf16[1], 0xc0c0);   // -6
  EXPECT_EQ(q.w_bf16[16], 0x3e80);  // 1 * 0.5 * 0.5 = 0.25
  EXPECT_EQ(q.w_bf16[17], 0xbe00);  // -0.5 * 0.5 * 0.5 = -0.125
  EXPECT_EQ(q.w_bf16[2], 0x0000);

  // The library's offset is the formula, and a bijection onto the padded table.
  for (int64_t cols : {4, 8, 16}) {
    std::set<int64_t> seen;
    for (int64_t r = 0; r < 256; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const int64_t off = nvfp4_scale_offset(r, c, cols);
        ASSERT_EQ(off, swizzled(r, c, cols)) << r << ", " << c;
        ASSERT_GE(off, 0);
        ASSERT_LT(off, 256 * cols);
        seen.insert(off);
      }
    EXPECT_EQ(int64_t(seen.size()), 256 * cols);
  }
  EXPECT_EQ(nvfp4_scale_offset(200, 9, 16), ((1 * 4) + 2) * 512 + 8 * 16 + 2 * 4 + 1);
}

// The loader keeps hand-made codes and scales of an nvfp4 block linear packed
// (Backend::prepare decodes), and they decode to the values by hand.
TEST(CheckpointNvfp4, LoaderKeepsHandMadeLayerPacked) {
  const ModelWeights w = ModelWeights::random(micro_config(), WeightFormat::nvfp4, 8);
  TempDir dir;
  const std::string base = dir.file("base.safetensors");
  write_checkpoint(w, base);
  std::vector<Owned> entries = read_entries(SafetensorsFile::open(base));
  constexpr int64_t kN = 256, kK = 256, kCols = 16;
  std::vector<uint8_t> codes(size_t(kN * kK / 2)), scales(size_t(kN * kCols));
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t j = 0; j < kK / 2; ++j)
      codes[size_t(n * kK / 2 + j)] = uint8_t((n * 7 + j * 5 + (n >> 3)) & 0xff);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = uint8_t(0x20 + (i * 37) % 0x30);
  const float global = 0.0078125f * 3.0f;
  Owned& wt = entry_named(entries, "blocks.0.attn.out_proj.weight");
  ASSERT_EQ(wt.shape, (std::vector<int64_t>{kN, kK / 2}));
  wt.data = as_bytes(codes);
  Owned& sc = entry_named(entries, "blocks.0.attn.out_proj.weight_scale");
  ASSERT_EQ(sc.shape, (std::vector<int64_t>{kN, kCols}));
  sc.data = as_bytes(scales);
  entry_named(entries, "blocks.0.attn.out_proj.weight_scale_2").data =
      as_bytes(std::vector<float>{global});
  const std::string path = dir.file("hand.safetensors");
  write_entries(path, entries, {});
  const QuantLinear q = load_checkpoint(path).blocks[0].attn.out;
  ASSERT_EQ(q.format, WeightFormat::nvfp4);
  EXPECT_TRUE(q.w_bf16.empty()) << "the loader decoded: a second copy of every NVFP4 weight";
  EXPECT_EQ(q.fp4_global, global);
  const std::vector<uint16_t> decoded = decode_nvfp4_values(q);
  ASSERT_EQ(decoded.size(), size_t(kN * kK));
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t k = 0; k < kK; ++k) {
      const uint8_t byte = codes[size_t(n * kK / 2 + k / 2)];
      const uint8_t code = k % 2 == 0 ? uint8_t(byte >> 4) : uint8_t(byte & 0x0f);
      const float s = e4m3_by_hand(scales[size_t(swizzled(n, k / 16, kCols))]);
      ASSERT_EQ(decoded[size_t(n * kK + k)], f32_to_bf16(e2m1_by_hand(code) * (s * global)).bits)
          << n << ", " << k;
    }
}

// ---- 6. interop with the Python `safetensors` package (H3S_PYTHON only) -------

#ifdef H3S_PYTHON

int run_command(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

std::string quoted(const std::string& s) {
  return "'" + s + "'";
}

std::string python_cmd(const std::string& args) {
  return quoted(H3S_PYTHON) + " " + quoted(H3S_ST_INTEROP_SCRIPT) + " " + args;
}

TEST(CheckpointPython, FileWrittenByPythonReadsCorrectly) {
  TempDir dir;
  const std::string np_file = dir.file("numpy.safetensors"), raw_file = dir.file("raw.safetensors");
  ASSERT_EQ(run_command(python_cmd("write " + quoted(np_file) + " " + quoted(raw_file))), 0);

  const SafetensorsFile f = SafetensorsFile::open(np_file);
  EXPECT_EQ(f.metadata().at("writer"), "st_interop.py");
  EXPECT_EQ(f.entry("f32").shape, (std::vector<int64_t>{3, 4}));
  const std::vector<float> f32 = f.read_as<float>("f32", "F32");
  for (size_t i = 0; i < f32.size(); ++i) EXPECT_EQ(f32[i], 0.5f * float(i) - 1.0f) << i;
  const std::vector<uint16_t> f16 = f.read_as<uint16_t>("f16", "F16");
  ASSERT_EQ(f16.size(), 4u);
  EXPECT_EQ(f16_to_f32(f16[0]), 1.5f);
  EXPECT_EQ(f16_to_f32(f16[1]), -2.0f);
  EXPECT_EQ(f16_to_f32(f16[2]), 65504.0f);
  EXPECT_EQ(f16_to_f32(f16[3]), std::ldexp(1.0f, -24));
  EXPECT_EQ(f.read_as<int8_t>("i8", "I8"), (std::vector<int8_t>{-128, -1, 0, 127}));
  EXPECT_EQ(f.read_as<int32_t>("i32", "I32"), (std::vector<int32_t>{-70000, 0, 70000}));
  EXPECT_EQ(f.read_as<int64_t>("i64", "I64"), (std::vector<int64_t>{-(int64_t(1) << 40), 7}));
  EXPECT_EQ(f.read_as<double>("f64", "F64"), (std::vector<double>{0.1, -1e300}));
  EXPECT_TRUE(f.entry("scalar").shape.empty());
  EXPECT_EQ(f.read_as<float>("scalar", "F32"), (std::vector<float>{3.25f}));
  EXPECT_EQ(f.entry("empty").shape, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(f.entry("empty").bytes, 0u);
  const std::vector<uint8_t> u8 = f.read_as<uint8_t>("layer.comfy_quant", "U8");
  const std::string json(u8.begin(), u8.end());
  const LayerQuant lq = parse_comfy_quant(json, "python");
  EXPECT_EQ(lq.format, WeightFormat::int8);
  EXPECT_TRUE(lq.convrot);

  // BF16 / F8_E4M3 written by the package's serializer (numpy has neither).
  if (fs::exists(raw_file)) {
    const SafetensorsFile r = SafetensorsFile::open(raw_file);
    EXPECT_EQ(r.read_as<uint16_t>("bf16", "BF16"),
              (std::vector<uint16_t>{0x3f80, 0xc000, 0x7f80, 0x0001}));
    EXPECT_EQ(r.entry("bf16").shape, (std::vector<int64_t>{2, 2}));
    const std::vector<uint8_t> e4 = r.read_as<uint8_t>("e4m3", "F8_E4M3");
    ASSERT_EQ(e4.size(), 3u);
    EXPECT_EQ(e4m3_to_f32(e4[0]), 1.0f);
    EXPECT_EQ(e4m3_to_f32(e4[1]), 2.0f);
    EXPECT_EQ(e4m3_to_f32(e4[2]), 448.0f);
  } else {
    ADD_FAILURE() << "st_interop.py wrote no BF16 / F8_E4M3 file";
  }
}

TEST(CheckpointPython, OurCheckpointReadsBackInPython) {
  TempDir dir;
  const std::string ck = dir.file("tiny_int8.safetensors"), digest = dir.file("digest.json");
  ASSERT_EQ(run_command(quoted(H3S_CLI_PATH) + " make-checkpoint --preset tiny --format int8 " +
                        "--blocks 1 " + quoted(ck) + " >/dev/null 2>&1"),
            0);
  ASSERT_EQ(run_command(python_cmd("check " + quoted(ck)) + " > " + quoted(digest)), 0);
  std::ifstream in(digest);
  const nlohmann::json j = nlohmann::json::parse(in);

  const SafetensorsFile f = SafetensorsFile::open(ck);
  EXPECT_EQ(j.at("metadata"), nlohmann::json(f.metadata()));
  const nlohmann::json& tensors = j.at("tensors");
  ASSERT_EQ(tensors.size(), f.names().size());
  for (const std::string& name : f.names()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(tensors.contains(name));
    const TensorEntry& e = f.entry(name);
    const nlohmann::json& t = tensors.at(name);
    EXPECT_EQ(t.at("dtype").get<std::string>(), e.dtype);
    EXPECT_EQ(t.at("shape").get<std::vector<int64_t>>(), e.shape);
    uint64_t sum = 0;
    for (size_t i = 0; i < e.bytes; ++i) sum += uint64_t(std::to_integer<uint8_t>(e.data[i]));
    EXPECT_EQ(t.at("byte_sum").get<uint64_t>(), sum);
  }
  EXPECT_GE(j.at("checked_values").get<int64_t>(), 8);
  const ModelWeights w = load_checkpoint(ck);
  EXPECT_EQ(w.format, WeightFormat::int8);
  EXPECT_EQ(w.config.hidden, 512);
}

#endif  // H3S_PYTHON

}  // namespace
}  // namespace h3s::test
