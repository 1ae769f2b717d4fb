// KvMixHeads: kvmix's heads on 8 bits for each DiT block (kvfmt/kvmix.hpp): the
// options' set, or one calibrated from the block's input on its first call
// and kept for the calls after (a ComfyUI sampler's later steps reuse it).
// The calibration makes the sample windows' q, k and v with the ops phase 1
// and 2 use (row-invariant, so the same bits as in any chunk) and scores
// them on the host: the set depends on the sequence alone, never on chunks,
// so a block's stock and streamed runs use the same one.
#pragma once

#include <map>
#include <vector>

#include "exec/block.hpp"
#include "exec/residual_rows.hpp"

namespace h3s {

// The calibration: the `count` heads of `block` most sensitive to fp4 K/V on
// input x.
std::vector<int> calibrate_kvmix(Backend& backend, Arena& arena, const BlockView& block,
                                 ResidualRows& x, int64_t count);

class KvMixHeads {
 public:
  // Empty unless options.kv_store is kvmix; then options.kv_mix_heads when
  // given (checked against the block's heads), else the set kept for
  // block.block_index, calibrated now (and logged in one line) if there is
  // none; a block with no index (-1) is calibrated on every call.
  std::vector<int> for_block(Backend& backend, Arena& arena, const BlockView& block,
                             ResidualRows& x, const ExecOptions& options);
  std::vector<int> for_block(Backend& backend, Arena& arena, const BlockView& block,
                             const Tensor& x, const ExecOptions& options);
  // Every calibrated set, by block index.
  std::map<int, std::vector<int>> kept() const;

 private:
  struct Kept {
    int64_t count = 0;  // a call asking another count calibrates again
    std::vector<int> heads;
  };
  std::map<int, Kept> kept_;
};

}  // namespace h3s
