// Flags shared by `h3s demo` and `h3s run`: model, sequence shape, and every
// control of docs/FEATURES.md "Controls".
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "h3s/options.hpp"
#include "model/config.hpp"
#include "model/packed_layout.hpp"

namespace h3s::cli {

struct RunArgs {
  std::string preset = "tiny";
  std::string backend = "cpu";
  std::string format = "bf16";
  std::string checkpoint;  // load weights from this file instead of --preset
  std::string time_form = "full";
  int64_t blocks = -1;  // -1: the preset's
  // Sequence: either --tokens, or frames/width/height (+ text/audio lengths).
  int64_t tokens = 0;
  int64_t frames = 0, width = 0, height = 0;
  int64_t text_len = -1, audio_len = -1;
  int64_t vision_pad_rows = 0;
  bool cond_frame = false;
  float sigma = 0.7f;
  uint64_t seed = 1;
  int threads = 0;
  std::string memory_budget = "0";
  std::string vram_budget = "0";
  std::string final_gemm = "exact";
  bool json = false;
  ExecOptions exec;
};

// Registers every flag on `cmd`; `defaults` supplies the chunk defaults shown
// in --help (demo scales them to the tiny model; run keeps the defaults of
// docs/FEATURES.md "Controls").
void add_run_flags(CLI::App& cmd, RunArgs& a);
// The controls of docs/FEATURES.md "Controls" alone (--q-chunk ... --self-check), for commands
// that take their model and shape from files (h3s forward).
void add_control_flags(CLI::App& cmd, ExecOptions& o, std::string& final_gemm);
// --attn-kernel and --gemm-kernel (ExecOptions::attn_kernel, gemm_kernel: the
// CUDA backend's kernels for comparison runs), part of the controls.
void add_kernel_flags(CLI::App& cmd, ExecOptions& o);

ModelConfig config_from(const RunArgs& a);
// The packed layout the flags describe; throws Error(invalid_argument) naming
// the flag to change.
PackedLayout layout_from(const RunArgs& a, const ModelConfig& cfg);
// "8GiB", "512MiB", "1000000", "0" (unlimited) -> bytes; errors name `flag`.
size_t parse_bytes(const std::string& s, const char* flag = "--memory-budget");

}  // namespace h3s::cli
