// What one DiT block execution needs besides its weights and the residual x.
#pragma once

#include <span>

#include "backend/backend.hpp"
#include "model/config.hpp"
#include "model/packed_layout.hpp"
#include "model/weights.hpp"

namespace h3s {

// The six modulation vectors of a block as [mod_rows, hidden] bf16 views.
struct BlockMods {
  ModTable msa;  // shift_msa, scale_msa
  Tensor gate_msa;
  ModTable mlp;  // shift_mlp, scale_mlp
  Tensor gate_mlp;
};

struct BlockContext {
  const ModelConfig* config = nullptr;
  const PackedLayout* layout = nullptr;
  Tensor rope;  // bf16 [seq, rope_dim / 2, 2]
  BlockMods mods;
  int block_index = 0;
};

// Split the adaLN projection output [timesteps, 6 * 3 * hidden] (bf16) into
// the six [timesteps * 3, hidden] views: row t * 3 + modality.
BlockMods split_block_mods(const Tensor& adaln_out, int64_t hidden);

}  // namespace h3s
