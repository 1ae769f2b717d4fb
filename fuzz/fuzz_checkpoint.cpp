// libFuzzer target for the untrusted-input parsers: the safetensors header
// reader (SafetensorsFile::from_bytes), checkpoint detection and loading
// (detect_config, load_checkpoint) and the per-layer quant JSON
// (parse_comfy_quant). Every rejection must be an h3s::Error that is not
// ErrorKind::internal (a failed H3S_CHECK means validation let bad input
// through); any other exception (std::terminate -> abort), crash, sanitizer
// report, leak or oversized allocation is a finding. Run by scripts/fuzz.sh.
//
// Input: an input whose first byte is 'J' is the rest as comfy_quant JSON;
// anything else is a whole safetensors file.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/safetensors.hpp"

namespace {

// Input rejections are expected; an internal invariant failure is a finding.
void expected(const h3s::Error& e) {
  if (e.kind() == h3s::ErrorKind::internal) {
    std::fprintf(stderr, "fuzz_checkpoint: internal error on input: %s\n", e.what());
    std::abort();
  }
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

void fuzz_file(const uint8_t* data, size_t size) {
  std::vector<std::byte> bytes(size);
  if (size != 0) std::memcpy(bytes.data(), data, size);
  try {
    const h3s::SafetensorsFile f = h3s::SafetensorsFile::from_bytes(std::move(bytes), "fuzz");
    // Touch every validated entry through the public accessors.
    for (const std::string& name : f.names()) {
      const h3s::TensorEntry& e = f.entry(name);
      try {
        (void)f.view(name);
      } catch (const h3s::Error& e) {
        expected(e);
      }
      if (e.elem_size == 1) (void)f.read_as<uint8_t>(name, e.dtype);
    }
    try {
      (void)h3s::detect_config(f);
    } catch (const h3s::Error& e) {
      expected(e);
      return;  // load_checkpoint starts with detect_config: it would fail the same way
    }
    h3s::CheckpointSummary summary;
    (void)h3s::load_checkpoint(f, &summary);
  } catch (const h3s::Error& e) {
    expected(e);
  }
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
