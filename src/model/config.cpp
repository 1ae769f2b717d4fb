// Presets and validation of ModelConfig.
#include "model/config.hpp"

#include "core/error.hpp"

namespace h3s {

ModelConfig ModelConfig::h3() {
  ModelConfig c;
  c.name = "h3";
  return c;
}

ModelConfig ModelConfig::tiny() {
  ModelConfig c;
  c.name = "tiny";
  c.hidden = 512;
  c.heads = 4;
  c.head_dim = 128;  // like the real model, so RoPE 96 of 128 is exercised
  c.ffn = 1024;
  c.blocks = 2;
  c.refiner_blocks = 1;
  c.text_dim = 256;
  c.time_hidden = 512;
  c.time_dim = 256;
  c.curve_grid = 65;
  return c;
}

ModelConfig ModelConfig::preset(std::string_view name) {
  if (name == "h3") return h3();
  if (name == "tiny") return tiny();
  fail(ErrorKind::invalid_argument, "unknown model preset '{}': use h3 or tiny", name);
}

void ModelConfig::validate() const {
  auto need = [](bool ok, const char* what, int64_t v, const char* rule) {
    if (!ok) fail(ErrorKind::invalid_argument, "model config: {} = {} {}", what, v, rule);
  };
  need(hidden > 0 && hidden % 256 == 0, "hidden", hidden,
       "must be a positive multiple of 256 (ConvRot group)");
  need(heads > 0, "heads", heads, "must be positive");
  need(head_dim == 128, "head_dim", head_dim, "must be 128 (the fused q/k norm + RoPE layout)");
  need(rope_dim > 0 && rope_dim % 2 == 0 && rope_dim <= head_dim && rope_dim / 2 == 3 * rope_freqs,
       "rope_dim", rope_dim, "must be even, <= head_dim and 6 x rope_freqs (t, h, w axes)");
  need(ffn > 0 && ffn % 256 == 0, "ffn", ffn, "must be a positive multiple of 256");
  need(blocks >= 0, "blocks", blocks, "must be >= 0");
  need(refiner_blocks >= 0, "refiner_blocks", refiner_blocks, "must be >= 0");
  need(text_dim > 0, "text_dim", text_dim, "must be positive");
  need(time_freq_dim > 0 && time_freq_dim % 2 == 0, "time_freq_dim", time_freq_dim,
       "must be positive and even");
  need(time_dim > 0, "time_dim", time_dim, "must be positive");
  need(curve_grid >= 2, "curve_grid", curve_grid, "must be >= 2");
}

}  // namespace h3s
