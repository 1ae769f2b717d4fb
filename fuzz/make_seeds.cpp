// Writes the seed corpus of fuzz_checkpoint into a directory: a handful of
// tiny safetensors files (each well under the fuzzer's 64 KiB -max_len) that
// reach progressively deeper into the reader, and comfy_quant JSON inputs
// ('J' + text). Generated at fuzz time by scripts/fuzz.sh, never committed.
//
// The H3 seeds use the smallest config detect_config accepts (hidden 256, one
// head of 128, ffn 256, one block, no refiner) with zero-sized stand-ins for
// the big block weights, so detection succeeds and load_checkpoint loads the
// patch projections, condition_proj (nvfp4 or W4A8) and the time embedder
// before it rejects the first block linear. Two complete models of that config
// (h3_full_*, ~200 KiB each, NVFP4 block linears: the smallest format) load
// fully, so the from_tensors, skip_dit_blocks and load_dit_block routes of the
// fuzzer start from inputs they accept.
//
// Usage: h3s_fuzz_make_seeds DIR
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/safetensors.hpp"

namespace {

using h3s::WriteEntry;

// Owns the bytes that WriteEntry spans point at.
class Builder {
 public:
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           std::vector<std::byte> bytes) {
    store_.push_back(std::move(bytes));
    entries_.push_back({name, dtype, std::move(shape), {}});
  }
  // Deterministic filler bytes (a small LCG).
  void fill(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
            size_t bytes) {
    std::vector<std::byte> b(bytes);
    for (std::byte& x : b) {
      state_ = state_ * 1103515245u + 12345u;
      x = std::byte((state_ >> 16) & 0xffu);
    }
    add(name, dtype, std::move(shape), std::move(b));
  }
  // `n` copies of one element of `elem` bytes (e.g. a bf16 1.0).
  void repeat(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
              size_t n, std::vector<uint8_t> elem) {
    std::vector<std::byte> b;
    for (size_t i = 0; i < n; ++i)
      for (uint8_t e : elem) b.push_back(std::byte(e));
    add(name, dtype, std::move(shape), std::move(b));
  }
  // Replaces the entry `name` (which must exist) by an empty tensor of `shape`.
  void empty(const std::string& name, const std::string& dtype, std::vector<int64_t> shape) {
    for (size_t i = 0; i < entries_.size(); ++i) {
      if (entries_[i].name != name) continue;
      entries_[i] = {name, dtype, std::move(shape), {}};
      store_[i].clear();
      return;
    }
    h3s::fail(h3s::ErrorKind::internal, "make_seeds: no seed tensor '{}'", name);
  }
  void text(const std::string& name, const std::string& s) {
    std::vector<std::byte> b(s.size());
    std::memcpy(b.data(), s.data(), s.size());
    add(name, "U8", {int64_t(s.size())}, std::move(b));
  }
  void write(const std::string& path, const std::map<std::string, std::string>& metadata = {}) {
    for (size_t i = 0; i < entries_.size(); ++i) entries_[i].bytes = store_[i];
    h3s::write_safetensors(path, entries_, metadata);
  }

 private:
  std::vector<std::vector<std::byte>> store_;
  std::vector<WriteEntry> entries_;
  uint32_t state_ = 1;
};

const std::vector<uint8_t> kBf16One = {0x80, 0x3f};
const std::vector<uint8_t> kF32One = {0x00, 0x00, 0x80, 0x3f};
const std::vector<uint8_t> kE4m3One = {0x38};

// The tensors every H3 seed shares: detection inputs and the island linears.
void h3_common(Builder& b, const std::string& p) {
  b.fill(p + "video_patch_proj.weight", "BF16", {256, 4}, 256 * 4 * 2);
  b.repeat(p + "video_patch_proj.bias", "BF16", {256}, 256, kBf16One);
  b.fill(p + "audio_patch_proj.weight", "F32", {256, 1}, 256 * 4);
  b.repeat(p + "audio_patch_proj.bias", "F16", {256}, 256, {0x00, 0x3c});
  b.repeat(p + "condition_proj.bias", "BF16", {256}, 256, kBf16One);
  b.repeat(p + "rope.inv_freq", "F32", {16}, 16, kF32One);
  b.repeat(p + "blocks.0.attn.q_norm.weight", "BF16", {128}, 128, kBf16One);
  b.add(p + "blocks.0.mlp.fc1.weight", "BF16", {512, 0}, {});
  b.fill(p + "final_layer.video_out.weight", "BF16", {4, 256}, 4 * 256 * 2);
  b.fill(p + "final_layer.audio_out.weight", "BF16", {1, 256}, 256 * 2);
}

// A detect_config-passing seed without quantised layers (the base of the
// regression seeds below).
void h3_plain(Builder& b) {
  h3_common(b, "");
  b.fill("condition_proj.weight", "BF16", {256, 1}, 256 * 2);
  b.repeat("adaln_t_table", "F32", {2, 1}, 2, kF32One);
  b.add("blocks.0.attn.qkv_proj.weight", "BF16", {384, 0}, {});
}

// The smallest complete model detect_config accepts: hidden 256, one head,
// ffn 256, one block, no refiner, 1-wide latents, text and time inputs.
h3s::ModelConfig smallest_model(h3s::TimeForm form) {
  h3s::ModelConfig c = h3s::ModelConfig::tiny();
  c.name = "fuzz";
  c.hidden = 256;
  c.heads = 1;
  c.ffn = 256;
  c.blocks = 1;
  c.refiner_blocks = 0;
  c.video_latent = 1;
  c.audio_latent = 1;
  c.text_dim = 1;
  c.time_freq_dim = 2;
  c.time_hidden = 1;
  c.time_dim = 1;
  c.time_form = form;
  c.curve_grid = 2;
  return c;
}

// A complete NVFP4 model of smallest_model(form) (W4A8 and int8 need 256-wide
// inputs, which out_proj's 128 is not; bf16 is four times larger), its keys
// behind `prefix`, written through write_checkpoint (the h3s writer).
void write_full_model(const std::string& path, h3s::TimeForm form, const std::string& prefix) {
  const std::string plain = path + ".plain";
  h3s::write_checkpoint(
      h3s::ModelWeights::random(smallest_model(form), h3s::WeightFormat::nvfp4, 5), plain);
  {
    const h3s::SafetensorsFile f = h3s::SafetensorsFile::open(plain);
    std::vector<WriteEntry> entries;
    for (const std::string& name : f.names()) {
      const h3s::TensorEntry& e = f.entry(name);
      entries.push_back({prefix + name, e.dtype, e.shape, {e.data, e.bytes}});
    }
    h3s::write_safetensors(path, entries, f.metadata());
  }
  std::filesystem::remove(plain);
}

void write_json(const std::filesystem::path& dir, const std::string& name,
                const std::string& json) {
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out << 'J' << json;
  if (!out) h3s::fail(h3s::ErrorKind::bad_input, "{}: cannot write", (dir / name).string());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    auto path = [&](const char* name) { return (dir / name).string(); };

    {  // Assorted dtypes, shapes (scalar, empty), metadata.
      Builder b;
      b.fill("a.bf16", "BF16", {3}, 6);
      b.fill("b.i64", "I64", {2}, 16);
      b.fill("c.fp8", "F8_E4M3", {4, 1}, 4);
      b.add("e.empty", "F32", {0, 5}, {});
      b.fill("m.i8", "I8", {2, 2, 2}, 8);
      b.fill("s.scalar", "F32", {}, 4);
      b.fill("z.f32", "F32", {2, 3}, 24);
      b.write(path("plain.safetensors"), {{"format", "pt"}, {"note", "h3s"}});
    }
    {  // No tensors at all.
      Builder b;
      b.write(path("empty.safetensors"));
    }
    {  // ComfyUI prefix, curve time form, nvfp4 condition_proj and qkv via comfy_quant tensors.
      Builder b;
      const std::string p = "model.diffusion_model.";
      h3_common(b, p);
      const std::string nvfp4 = h3s::comfy_quant_json(h3s::WeightFormat::nvfp4);
      b.fill(p + "condition_proj.weight", "U8", {256, 8}, 256 * 8);
      b.repeat(p + "condition_proj.weight_scale", "F8_E4M3", {256, 4}, 256 * 4, kE4m3One);
      b.repeat(p + "condition_proj.weight_scale_2", "F32", {}, 1, kF32One);
      b.text(p + "condition_proj.comfy_quant", nvfp4);
      b.repeat(p + "adaln_t_table", "F32", {2, 1}, 2, kF32One);
      b.add(p + "blocks.0.attn.qkv_proj.weight", "U8", {384, 0}, {});
      b.text(p + "blocks.0.attn.qkv_proj.comfy_quant", nvfp4);
      b.write(path("h3_nvfp4.safetensors"));
    }
    {  // No prefix, full time form, W4A8 condition_proj and int8 qkv via the header metadata.
      Builder b;
      h3_common(b, "");
      b.fill("condition_proj.weight", "I8", {256, 128}, 256 * 128);
      b.repeat("condition_proj.weight_s_rel", "F8_E4M3", {256, 16}, 256 * 16, kE4m3One);
      b.repeat("condition_proj.weight_s_channel", "F32", {256}, 256, kF32One);
      b.repeat("condition_proj.weight_codebook", "F32", {16}, 16, kF32One);
      b.fill("time_embedder.proj_in.weight", "F32", {1, 2}, 8);
      b.repeat("time_embedder.proj_in.bias", "F32", {1}, 1, kF32One);
      b.fill("time_embedder.proj_out.weight", "F32", {1, 1}, 4);
      b.repeat("time_embedder.proj_out.bias", "F32", {1}, 1, kF32One);
      b.add("blocks.0.attn.qkv_proj.weight", "I8", {384, 0}, {});
      const std::string layers =
          "{\"layers\": {\"condition_proj\": " + h3s::comfy_quant_json(h3s::WeightFormat::w4a8) +
          ", \"blocks.0.attn.qkv_proj\": " + h3s::comfy_quant_json(h3s::WeightFormat::int8) + "}}";
      b.write(path("h3_w4a8.safetensors"), {{"_quantization_metadata", layers}});
    }

    // Complete models: full time form without a prefix, curve form with ComfyUI's.
    write_full_model(path("h3_full_nvfp4.safetensors"), h3s::TimeForm::full, "");
    write_full_model(path("h3_full_nvfp4_curve.safetensors"), h3s::TimeForm::curve,
                     "model.diffusion_model.");

    // Regression inputs for detect_config bugs found while writing this fuzzer: each must be
    // rejected with an h3s::Error (not UB, not std::out_of_range).
    const int64_t huge = int64_t(1) << 60;  // empty tensors: any size passes the reader
    {                                       // A block index past stoll's range.
      Builder b;
      h3_plain(b);
      b.add("blocks.99999999999999999999.x", "U8", {0}, {});
      b.write(path("regress_block_index.safetensors"));
    }
    {  // head_dim 2^60: 3 x head_dim overflowed.
      Builder b;
      h3_plain(b);
      b.empty("blocks.0.attn.q_norm.weight", "BF16", {huge, 0});
      b.write(path("regress_head_dim.safetensors"));
    }
    {  // rope.inv_freq 2^60 long: 6 x rope_freqs overflowed.
      Builder b;
      h3_plain(b);
      b.empty("rope.inv_freq", "F32", {huge, 0});
      b.write(path("regress_rope.safetensors"));
    }
    {  // nvfp4 condition_proj [0, 2^62]: its logical width 2 x 2^62 overflowed.
      Builder b;
      h3_plain(b);
      b.empty("condition_proj.weight", "U8", {0, int64_t(1) << 62});
      b.text("condition_proj.comfy_quant", h3s::comfy_quant_json(h3s::WeightFormat::nvfp4));
      b.write(path("regress_packed_width.safetensors"));
    }

    write_json(dir, "q_int8.json", h3s::comfy_quant_json(h3s::WeightFormat::int8));
    write_json(dir, "q_w4a8.json", h3s::comfy_quant_json(h3s::WeightFormat::w4a8));
    write_json(dir, "q_nvfp4.json", h3s::comfy_quant_json(h3s::WeightFormat::nvfp4));
    write_json(dir, "q_params.json",
               R"({"format": "asym_w4a8_int8", "params": {"group_size": 16, "convrot": true}})");
    write_json(dir, "q_bad.json", R"({"format": "int8_tensorwise", "convrot": false})");
    std::printf("make_seeds: wrote seeds to %s\n", dir.string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
