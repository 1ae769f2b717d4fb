// `h3s kvbench --checkpoint`: the q, k, v one DiT block of a checkpoint
// attends with, from a real forward (the checkpoint's weights, seeded random
// latents and text states at the requested length, as `h3s demo --checkpoint`
// runs them). The forward runs up to the block's input; the block's fused QKV
// is then made by the stock block's own step (norm1 -> modulation -> QKV ->
// q/k RMSNorm + RoPE), so q, k, v are the bits that block's attention reads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/engine_backend.hpp"

namespace h3s::cli {

struct CapturedQkv {
  std::vector<uint16_t> q, k, v;  // [tokens, heads * head_dim] bf16 bits
  int64_t tokens = 0, heads = 0, head_dim = 0;
  int64_t blocks = 0;  // the checkpoint's DiT blocks
  std::string format;  // its block linears' weight format
};

// Throws Error naming the file (unreadable, not an H3 checkpoint), or
// --block / --tokens and their ranges.
CapturedQkv capture_block_qkv(EngineBackend& backend, const std::string& path, int64_t block,
                              int64_t tokens, uint64_t seed);

}  // namespace h3s::cli
