// libFuzzer target for the untrusted-input parsers: the safetensors header
// reader (SafetensorsFile::from_bytes), checkpoint detection and loading
// (detect_config, load_checkpoint, load_dit_block), the in-memory route of the
// Python module's Engine.from_tensors / load_block (SafetensorsFile::
// from_entries, LoadOptions::skip_dit_blocks) and the per-layer quant JSON
// (parse_comfy_quant). Every rejection must be an h3s::Error that is not
// ErrorKind::internal (a failed H3S_CHECK means validation let bad input
// through); any other exception (std::terminate -> abort), crash, sanitizer
// report, leak or oversized allocation is a finding. Run by scripts/fuzz.sh.
//
// After a successful detect_config the same tensors also go through:
//  - from_entries + load_checkpoint (from_tensors): the same outcome as the
//    file, to the error message, and on success the same weights bit for bit;
//  - from_entries with every DiT block's data unreadable (ASan-poisoned, where
//    a lazy from_tensors may hand over GPU pointers) + skip_dit_blocks: reads
//    none of it, fails only where the full load fails, and on success holds
//    the full load's non-block weights and empty DiT blocks;
//  - load_dit_block(0) over block 0's tensors alone (load_block): succeeds
//    with the full load's block 0 where the full load succeeds; over the whole
//    file and for an out-of-range index it must fail cleanly.
//
// Input: an input whose first byte is 'J' is the rest as comfy_quant JSON;
// anything else is a whole safetensors file.
#include <sanitizer/asan_interface.h>  // ASAN_(UN)POISON_MEMORY_REGION: no-ops without ASan

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_keys.hpp"
#include "model/safetensors.hpp"

namespace {

// Input rejections are expected; an internal invariant failure is a finding.
void expected(const h3s::Error& e) {
  if (e.kind() == h3s::ErrorKind::internal) {
    std::fprintf(stderr, "fuzz_checkpoint: internal error on input: %s\n", e.what());
    std::abort();
  }
}

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_checkpoint: %s\n", what.c_str());
  std::abort();
}

void fuzz_quant_json(std::string_view text) {
  try {
    const h3s::LayerQuant q = h3s::parse_comfy_quant(text, "fuzz");
    // An accepted config must round-trip through the writer's spelling.
    (void)h3s::parse_comfy_quant(h3s::comfy_quant_json(q.format), "fuzz-rt");
  } catch (const h3s::Error& e) {
    expected(e);
  }
}

// ---- weights compared bit for bit ---------------------------------------------

// Any contiguous array (std::vector, h3s::WeightArray): same length, same bytes.
template <class Array>
bool same_bits(const Array& a, const Array& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(*a.data())) == 0);
}

bool same(const h3s::QuantLinear& a, const h3s::QuantLinear& b) {
  return a.format == b.format && a.out == b.out && a.in == b.in && same_bits(a.w_bf16, b.w_bf16) &&
         same_bits(a.w_f32, b.w_f32) && same_bits(a.w_i8, b.w_i8) &&
         same_bits(a.w_scale, b.w_scale) && same_bits(a.w4_codes, b.w4_codes) &&
         same_bits(a.w4_s_rel, b.w4_s_rel) && same_bits(a.w4_codebook, b.w4_codebook) &&
         same_bits(a.fp4_codes, b.fp4_codes) && same_bits(a.fp4_scales, b.fp4_scales) &&
         std::memcmp(&a.fp4_global, &b.fp4_global, sizeof(float)) == 0 && same_bits(a.bias, b.bias);
}

bool is_dit_slot(std::string_view name) {
  return name.substr(0, 7) == "blocks.";
}

// The first weight slot accepted by `keep` whose bits differ between a and b
// (models of one config), or "".
template <class Keep>
std::string first_difference(h3s::ModelWeights& a, h3s::ModelWeights& b, Keep&& keep) {
  const h3s::WeightSlots sa = h3s::weight_slots(a), sb = h3s::weight_slots(b);
  for (size_t i = 0; i < sa.linears.size(); ++i)
    if (keep(sa.linears[i].name) && !same(*sa.linears[i].q, *sb.linears[i].q))
      return sa.linears[i].name;
  for (size_t i = 0; i < sa.norms.size(); ++i)
    if (keep(sa.norms[i].name) && !same_bits(*sa.norms[i].v, *sb.norms[i].v))
      return sa.norms[i].name;
  for (size_t i = 0; i < sa.buffers.size(); ++i)
    if (keep(sa.buffers[i].name) && !same_bits(*sa.buffers[i].v, *sb.buffers[i].v))
      return sa.buffers[i].name;
  return "";
}

// ---- the in-memory (from_tensors) route ---------------------------------------

// Memory no byte may be read from: a lazy from_tensors hands over GPU pointers
// for DiT block data (src/python/weights_from_arrays.cpp), which the host must
// never dereference. ASan reports any read as use-after-poison.
class Unreadable {
 public:
  Unreadable() = default;
  Unreadable(const Unreadable&) = delete;
  Unreadable& operator=(const Unreadable&) = delete;
  ~Unreadable() {
    for (const auto& [p, n] : held_) ASAN_UNPOISON_MEMORY_REGION(p.get(), n);
  }
  const std::byte* hold(size_t bytes) {
    auto& [p, n] = held_.emplace_back(std::make_unique<std::byte[]>(bytes), bytes);
    ASAN_POISON_MEMORY_REGION(p.get(), n);
    return p.get();
  }

 private:
  std::vector<std::pair<std::unique_ptr<std::byte[]>, size_t>> held_;
};

// f's entries that `keep` accepts, as a host hands tensors to from_entries
// (pointing at f's bytes).
template <class Keep>
std::vector<h3s::TensorEntry> entries_of(const h3s::SafetensorsFile& f, Keep&& keep) {
  std::vector<h3s::TensorEntry> out;
  for (const std::string& name : f.names())
    if (keep(name)) out.push_back(f.entry(name));
  return out;
}

// from_entries must take whatever from_bytes accepted: they validate the same way.
h3s::SafetensorsFile in_memory(std::vector<h3s::TensorEntry> entries,
                               const h3s::SafetensorsFile& f) {
  try {
    return h3s::SafetensorsFile::from_entries(std::move(entries), f.metadata(), f.path());
  } catch (const h3s::Error& e) {
    finding(std::string("from_entries rejects tensors from_bytes accepted: ") + e.what());
  }
}

struct Loaded {
  std::optional<h3s::ModelWeights> weights;
  std::string error;  // what() of the rejection, when weights is empty
};

template <class Load>
Loaded attempt(Load&& load) {
  Loaded r;
  try {
    r.weights = load();
  } catch (const h3s::Error& e) {
    expected(e);
    r.error = e.what();
  }
  return r;
}

// Engine.from_tensors: the file's tensors over borrowed memory, same loader.
void check_from_tensors(const h3s::SafetensorsFile& f, Loaded& file) {
  const h3s::SafetensorsFile m =
      in_memory(entries_of(f, [](const std::string&) { return true; }), f);
  Loaded mem = attempt([&] { return h3s::load_checkpoint(m); });
  if (mem.weights.has_value() != file.weights.has_value() || mem.error != file.error)
    finding("from_entries load differs from the file's: file '" + file.error + "', entries '" +
            mem.error + "'");
  if (file.weights) {
    const std::string d =
        first_difference(*file.weights, *mem.weights, [](std::string_view) { return true; });
    if (!d.empty() || file.weights->format != mem.weights->format)
      finding("from_entries load holds other weights than the file's: '" + d + "'");
  }
}

// Engine.from_tensors(lazy_blocks=True) with every DiT block's data unreadable.
void check_lazy(const h3s::SafetensorsFile& f, Loaded& file) {
  Unreadable poison;
  std::vector<h3s::TensorEntry> entries = entries_of(f, [](const std::string&) { return true; });
  for (h3s::TensorEntry& e : entries)
    if (e.bytes != 0 && h3s::is_dit_block_data(e.name)) e.data = poison.hold(e.bytes);
  const h3s::SafetensorsFile m = in_memory(std::move(entries), f);
  h3s::LoadOptions skip;
  skip.skip_dit_blocks = true;
  Loaded lazy = attempt([&] { return h3s::load_checkpoint(m, nullptr, skip); });
  if (!lazy.weights) {
    if (file.weights)
      finding("skip_dit_blocks load fails where the full load succeeds: " + lazy.error);
    return;
  }
  const h3s::WeightSlots slots = h3s::weight_slots(*lazy.weights);
  for (const h3s::LinearSlot& s : slots.linears)
    if (is_dit_slot(s.name) && s.q->out != 0)
      finding("skip_dit_blocks load filled DiT layer '" + s.name + "'");
  if (file.weights) {
    const std::string d = first_difference(*file.weights, *lazy.weights,
                                           [](std::string_view n) { return !is_dit_slot(n); });
    if (!d.empty() || file.weights->format != lazy.weights->format)
      finding("skip_dit_blocks load differs from the full load outside the DiT blocks: '" + d +
              "'");
  }
}

// Engine.load_block(0, block 0's tensors), and load_dit_block's refusals.
void check_block0(const h3s::SafetensorsFile& f, const h3s::ModelConfig& cfg,
                  const std::string& prefix, Loaded& file) {
  if (cfg.blocks < 1) return;
  const std::string stem = prefix + "blocks.0.";
  const h3s::SafetensorsFile one = in_memory(
      entries_of(f, [&](const std::string& n) { return n.compare(0, stem.size(), stem) == 0; }), f);
  std::optional<h3s::BlockWeights> block;
  try {
    block = h3s::load_dit_block(one, cfg, 0);
  } catch (const h3s::Error& e) {
    expected(e);
    if (file.weights)
      finding(std::string("block 0 alone fails where the full load succeeds: ") + e.what());
  }
  if (block && file.weights) {
    h3s::ModelWeights w;
    w.config = cfg;
    w.blocks.resize(size_t(cfg.blocks));
    w.refiner.resize(size_t(cfg.refiner_blocks));
    w.blocks[0] = std::move(*block);
    const std::string d = first_difference(
        *file.weights, w, [](std::string_view n) { return n.substr(0, 9) == "blocks.0."; });
    if (!d.empty()) finding("block 0 alone differs from the full load's: '" + d + "'");
  }
  // The whole file is more than block 0 (it has video_patch_proj at least).
  try {
    (void)h3s::load_dit_block(f, cfg, 0);
    finding("load_dit_block(0) accepted the whole file");
  } catch (const h3s::Error& e) {
    expected(e);
  }
  try {
    (void)h3s::load_dit_block(one, cfg, cfg.blocks);
    finding("load_dit_block accepted an out-of-range index");
  } catch (const h3s::Error& e) {
    expected(e);
    if (e.kind() != h3s::ErrorKind::invalid_argument)
      finding(std::string("out-of-range block index is not invalid_argument: ") + e.what());
  }
}

void fuzz_file(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(size);
  if (size != 0) std::memcpy(bytes.data(), data, size);
  std::optional<h3s::SafetensorsFile> file;
  try {
    file.emplace(h3s::SafetensorsFile::from_bytes(std::move(bytes), "fuzz"));
  } catch (const h3s::Error& e) {
    expected(e);
    return;
  }
  const h3s::SafetensorsFile& f = *file;
  // Touch every validated entry through the public accessors.
  for (const std::string& name : f.names()) {
    const h3s::TensorEntry& e = f.entry(name);
    try {
      (void)f.view(name);
    } catch (const h3s::Error& err) {
      expected(err);
    }
    if (e.elem_size == 1) (void)f.read_as<uint8_t>(name, e.dtype);
  }
  h3s::ModelConfig cfg;
  std::string prefix;
  try {
    cfg = h3s::detect_config(f, &prefix);
  } catch (const h3s::Error& e) {
    expected(e);
    return;  // every load starts with detect_config: it would fail the same way
  }
  h3s::CheckpointSummary summary;
  Loaded full = attempt([&] { return h3s::load_checkpoint(f, &summary); });
  check_from_tensors(f, full);
  check_lazy(f, full);
  check_block0(f, cfg, prefix, full);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] == 'J') {
    fuzz_quant_json(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1));
  } else {
    fuzz_file(data, size);
  }
  return 0;
}
