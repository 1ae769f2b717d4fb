// h3s::Engine: one MiniMax-H3 model on one backend, made from a ComfyUI-format
// checkpoint file (mapped, used in place) or from a caller's arrays (borrowed,
// never copied). It runs the whole forward on real inputs (h3s/forward.hpp)
// or single DiT blocks exactly as ComfyUI's block call does. Streamed and
// stock runs give the same bits; every error is an h3s::Error naming the
// operand and the fix, raised before any work.
//
//   #include <h3s/h3s.hpp>
//   h3s::Engine eng = h3s::Engine::from_checkpoint("h3_int8.safetensors");
//   h3s::LatentOutputs out = eng.forward(inputs);       // Options{} = streamed
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "h3s/array.hpp"
#include "h3s/error.hpp"
#include "h3s/forward.hpp"
#include "h3s/options.hpp"

namespace h3s {

// Where an engine runs.
struct EngineSetup {
  std::string backend = "cpu";  // "cpu", or "cuda" when this build has the CUDA backend
  int device = 0;               // the CUDA device
  int threads = 0;              // CPU worker threads; 0: every hardware thread
  uint64_t arena_budget = 0;    // activation arena bytes; 0: no limit
  // run_block: device bytes for prepared block weights (resident when all
  // fit; otherwise prepared per call); 0: no limit. The forward's own budget
  // is Options::vram_budget.
  uint64_t block_vram_budget = 0;
};

// One tensor of a state dict, by its checkpoint name ("blocks.0.attn.qkv_proj.
// weight", optionally prefixed "model.diffusion_model."). safetensors_dtype
// overrides the array's dtype name when its bytes mean another type of the
// same size ("F8_E4M3" handed over as u8); empty: from the array's dtype.
struct NamedArray {
  std::string name;
  ArrayRef array;
  std::string safetensors_dtype;
};

struct ModelInfo {
  std::string format;     // bf16, int8, w4a8 or nvfp4 (the DiT blocks' linears)
  std::string time_form;  // full or curve
  int64_t hidden = 0, blocks = 0, refiner_blocks = 0, heads = 0, head_dim = 0, ffn = 0;
  int64_t text_dim = 0, video_latent = 0, audio_latent = 0, time_dim = 0;
  int64_t rope_dim = 0;  // rotated features per head: run_block's rope is [S, rope_dim / 2, 2]
  size_t weight_bytes = 0;
};

// ComfyUI's mod_segments: rows [begin, end) use modulation row mod_row.
struct ModSegment {
  int64_t begin = 0, end = 0;
  int32_t mod_row = 0;
};

// One DiT block, as ComfyUI's DiTBlock.forward(x, t_emb, mod_segments,
// rope_freqs); every array on the engine's device (host memory for "cpu").
struct BlockCall {
  int64_t index = 0;  // 0 .. blocks - 1
  ArrayRef x;         // bf16 [S, hidden]: updated in place
  ArrayRef t_emb;     // [timesteps, time_dim]: bf16 (full time form) or f32 (curve form)
  std::vector<ModSegment> segments;  // cover [0, S) in order; mod_row < 3 x timesteps
  ArrayRef rope;                     // bf16 [S, rope_dim / 2, 2]: (cos, sin) pairs
  ExecMode mode = ExecMode::streamed;
  Options options;
  uintptr_t cuda_stream = 0;  // the caller's cudaStream_t (0: the legacy default stream)
};

class Engine {
 public:
  // Maps the file; its weights are used in place.
  static Engine from_checkpoint(const std::string& path, const EngineSetup& setup = {});
  // The caller's arrays (host or CUDA memory), through the same per-layer
  // format dispatch and checks as a file. They are borrowed: keep_alive is held
  // for as long as the engine (or any weight view) lives, and the memory must
  // stay valid and unchanged until then. metadata: the file's header metadata
  // ("_quantization_metadata"), when the format needs it.
  static Engine from_arrays(std::vector<NamedArray> arrays,
                            std::map<std::string, std::string> metadata,
                            std::shared_ptr<const void> keep_alive, const EngineSetup& setup = {});

  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  ~Engine();

  ModelInfo info() const;
  const std::string& backend() const;

  // The whole model on real inputs (h3s/forward.hpp). options.mode stock runs
  // every block stock (ComfyUI's shape); streamed runs blocks of at least
  // options.min_tokens tokens chunked; the outputs are the same bits.
  LatentOutputs forward(const LatentInputs& inputs, const Options& options = {},
                        const ProgressFn& progress = {});

  // One block in place on call.x. Returns the mode that ran: streamed only
  // when asked and x has at least options.min_tokens rows (as in the forward).
  ExecMode run_block(const BlockCall& call);

 private:
  struct Impl;
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The CUDA backend is in this build (a GPU may still be missing).
bool cuda_built();
// The library's version, "major.minor.patch".
std::string version();

}  // namespace h3s
