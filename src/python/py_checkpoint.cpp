// make_checkpoint: deterministic synthetic H3 checkpoints in ComfyUI's format
// (the same files as `h3s make-checkpoint`), so Python tests and examples need
// no CLI and no real weights.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "python/bindings.hpp"

namespace h3s::py {

namespace nb = nanobind;
using namespace nb::literals;

namespace {

void make_checkpoint(const std::string& path, const std::string& preset, const std::string& format,
                     const std::string& time_form, int64_t blocks, uint64_t seed) {
  ModelConfig c = ModelConfig::preset(preset);
  if (time_form == "curve") {
    c.time_form = TimeForm::curve;
    c.time_dim = 8;  // the released curve checkpoints' adaln_t_table width (as the CLI)
  } else if (time_form != "full") {
    fail(ErrorKind::invalid_argument, "time_form '{}' is not valid: use 'full' or 'curve'",
         time_form);
  }
  if (blocks >= 0) c.blocks = blocks;
  c.validate();
  const ModelWeights w = ModelWeights::random(c, parse_format(format), seed);
  write_checkpoint(w, path,
                   {{"h3stream_preset", preset},
                    {"h3stream_format", format},
                    {"h3stream_seed", std::to_string(seed)}});
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
  m.def(
      "make_checkpoint",
      [](const std::string& path, const std::string& preset, const std::string& format,
         const std::string& time_form, int64_t blocks, uint64_t seed) {
        const nb::gil_scoped_release unlocked;
        make_checkpoint(path, preset, format, time_form, blocks, seed);
      },
      "path"_a, "preset"_a = "tiny", "format"_a = "bf16", "time_form"_a = "full", "blocks"_a = -1,
      "seed"_a = 1,
      "Write a synthetic H3 checkpoint (random weights, ComfyUI layout): preset tiny|h3, "
      "format bf16|int8|w4a8|nvfp4, time_form full|curve, blocks (-1: the preset's).");
}

}  // namespace h3s::py
