// make_checkpoint: deterministic synthetic H3 checkpoints in ComfyUI's format
// (the same files as `h3s make-checkpoint`), so Python tests and examples need
// no CLI and no real weights.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <map>
#include <string>

#include "core/error.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_drawn.hpp"
#include "python/bindings.hpp"

namespace h3s::py {

namespace nb = nanobind;
using namespace nb::literals;

namespace {

void make_checkpoint(const std::string& path, const std::string& preset, const std::string& format,
                     const std::string& time_form, int64_t blocks, uint64_t seed,
                     const std::string& weights) {
  if (weights != "seeded" && weights != "drawn")
    fail(ErrorKind::invalid_argument, "weights '{}' is not valid: use 'seeded' or 'drawn'",
         weights);
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
  std::map<std::string, std::string> metadata = {{"h3stream_preset", preset},
                                                 {"h3stream_format", format},
                                                 {"h3stream_seed", std::to_string(seed)}};
  if (weights == "drawn") {
    // The same route as `h3s make-checkpoint --weights drawn`: streamed to
    // disk as drawn, on every hardware thread.
    metadata.emplace("h3stream_weights", "drawn");
    write_drawn_checkpoint(path, c, parse_format(format), seed, metadata);
    return;
  }
  const ModelWeights w = ModelWeights::random(c, parse_format(format), seed);
  write_checkpoint(w, path, metadata);
}

}  // namespace

void bind_checkpoint(nb::module_& m) {
  m.def(
      "make_checkpoint",
      [](const std::string& path, const std::string& preset, const std::string& format,
         const std::string& time_form, int64_t blocks, uint64_t seed, const std::string& weights) {
        const nb::gil_scoped_release unlocked;
        make_checkpoint(path, preset, format, time_form, blocks, seed, weights);
      },
      "path"_a, "preset"_a = "tiny", "format"_a = "bf16", "time_form"_a = "full", "blocks"_a = -1,
      "seed"_a = 1, "weights"_a = "seeded",
      "Write a synthetic H3 checkpoint (random weights, ComfyUI layout): preset tiny|h3, "
      "format bf16|int8|w4a8|nvfp4, time_form full|curve, blocks (-1: the preset's), "
      "weights seeded|drawn (seeded: bf16 weights made and quantised, the whole model in "
      "memory; drawn: codes and scales drawn directly and streamed to disk, for full-size "
      "files whose values do not matter).");
}

}  // namespace h3s::py
