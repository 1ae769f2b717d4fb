// Splitting the adaLN projection into the six modulation tables.
#include "exec/block_context.hpp"

namespace h3s {

BlockMods split_block_mods(const Tensor& adaln_out, int64_t hidden) {
  const int64_t per_mod = ModelConfig::kBlockMods * hidden;  // one modality's 6 vectors
  H3S_CHECK(adaln_out.cols() == ModelConfig::kModalities * per_mod && adaln_out.is_contiguous());
  // [T, 3 * 6H] -> [T * 3, 6H]: row t * 3 + modality (ComfyUI's view()).
  Tensor rows =
      Tensor::contiguous(adaln_out.data, DType::bf16,
                         {adaln_out.rows() * ModelConfig::kModalities, per_mod}, adaln_out.device);
  auto part = [&](int e) { return rows.cols_view(e * hidden, (e + 1) * hidden); };
  BlockMods m;
  m.msa = {part(0), part(1)};
  m.gate_msa = part(2);
  m.mlp = {part(3), part(4)};
  m.gate_mlp = part(5);
  return m;
}

}  // namespace h3s
