// write_drawn_checkpoint: a ComfyUI-format H3 checkpoint of drawn weights
// (drawn_tensors.hpp), streamed to disk as it is drawn: the header first,
// then the tensors in data order, a bounded number of bytes in memory
// whatever the model's size, drawn on every hardware thread. The same seed
// gives the same bytes whatever the thread count. For full-size files
// written fast (timing runs); the seeded weights (ModelWeights::random +
// write_checkpoint) remain the files whose values mean something.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "model/config.hpp"
#include "model/quant_linear.hpp"

namespace h3s {

// The file's data holds the tensors by element size, then by name (the
// reference layout), so each DiT block is written in runs: its fp32 scales,
// then its bf16 weights, then its 1-byte codes, blocks in name order (0, 1,
// 10, 11, ...) within each.
struct DrawnProgress {
  std::string tensors;              // the dtypes being written, e.g. "BF16"; empty at the end
  int64_t section_blocks_done = 0;  // blocks whose `tensors` are written
  int64_t blocks_done = 0;          // blocks whose tensors are all written
  int64_t blocks = 0;
  size_t bytes_done = 0, bytes = 0;  // of the file
};

struct DrawnCheckpointOptions {
  int threads = 0;  // drawing threads; 0: every hardware thread
  // Bytes drawn while the previous batch is written: two batches are held.
  size_t batch_bytes = size_t(128) << 20;
  // Called on the calling thread after each batch in which a block's run
  // was completed, and once at the end.
  std::function<void(const DrawnProgress&)> on_progress;
};

// Writes the checkpoint to "<path>.part", renamed to `path` when complete
// (safetensors_stream.hpp). metadata: the header's, beside "format": "pt".
// Error(invalid_argument) for a bad config, format or thread count (before
// any file is created); Error(bad_input) naming the file when writing fails.
void write_drawn_checkpoint(const std::string& path, const ModelConfig& cfg, WeightFormat format,
                            uint64_t seed, const std::map<std::string, std::string>& metadata = {},
                            const DrawnCheckpointOptions& options = {});

}  // namespace h3s
