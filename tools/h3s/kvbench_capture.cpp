// A DiT block's q, k, v from a real forward of a checkpoint (see kvbench_capture.hpp).
#include "kvbench_capture.hpp"

#include "cli_args.hpp"
#include "core/error.hpp"
#include "exec/block_steps.hpp"
#include "exec/forward.hpp"
#include "model/checkpoint.hpp"

namespace h3s::cli {

CapturedQkv capture_block_qkv(EngineBackend& eb, const std::string& path, int64_t block,
                              int64_t tokens, uint64_t seed) {
  ModelWeights w;
  try {
    w = load_checkpoint(path);
  } catch (const Error& e) {
    fail(e.kind(), "kvbench --checkpoint: {}", e.what());  // the message names the file
  }
  const ModelConfig& cfg = w.config;
  if (block < 0 || block >= cfg.blocks)
    fail(ErrorKind::invalid_argument,
         "kvbench --block {}: {} has {} DiT blocks; use a block from 0 to {}", block, path,
         cfg.blocks, cfg.blocks - 1);
  RunArgs shape;
  shape.tokens = tokens;
  const PackedLayout layout = layout_from(shape, cfg);  // names --tokens when too short
  const ForwardInputs inputs = random_inputs(cfg, layout, seed);
  Backend& be = eb.ops();
  Arena& arena = eb.arena();
  CapturedQkv c;
  c.tokens = layout.seq_len;
  c.heads = cfg.heads;
  c.head_dim = cfg.head_dim;
  c.blocks = cfg.blocks;
  c.format = std::string(format_name(w.format));
  // The default controls (docs/FEATURES.md "Controls") and the exact store: blocks before `block`
  // give the bits of any exact run (streamed == stock), and x stays on the backend.
  ExecOptions opt;
  const BlockTap tap = [&](size_t i, const BlockView& view, const Tensor& x) {
    if (int64_t(i) != block) return true;
    const int64_t inner = view.heads * view.head_dim;
    OwnedTensor qkv = steps::fused_qkv(be, arena, view, x, {0, c.tokens});
    OwnedTensor part = arena.tensor(DType::bf16, {c.tokens, inner}, "kvbench captured part");
    int64_t col = 0;
    for (std::vector<uint16_t>* host : {&c.q, &c.k, &c.v}) {
      be.copy(qkv.view.cols_view(col, col + inner), part.view);
      host->resize(size_t(c.tokens * inner));
      be.download(part.view, host->data());
      col += inner;
    }
    be.synchronize();
    return false;  // nothing after this block's input is needed
  };
  run_forward(be, arena, w, layout, inputs, opt, {}, tap);
  return c;
}

}  // namespace h3s::cli
