// Steps shared by the stock and streamed executors, each over a row range of
// the residual. Sharing them is what makes "stock is the same ops over one
// chunk" (docs/DESIGN.md, invariant 3) true by construction. Each takes the rows'
// tensor `xr` ([rows.size(), hidden] on the backend: a view of x, or a
// chunk staged in from host memory) and their absolute range `rows` (for the
// modulation runs).
#pragma once

#include "exec/block.hpp"

namespace h3s::steps {

// Mod runs of `rows`, relative to rows.begin (empty for refiner blocks).
std::vector<ModRun> runs_for(const BlockView& b, RowRange rows);

// bf16 [rows, hidden]: RMSNorm(xr) * norm (+ modulation when the block has it).
OwnedTensor norm_mod(Backend& be, Arena& arena, const BlockView& b, const Tensor& xr, RowRange rows,
                     const WeightArray<uint16_t>& norm, const ModTable* mod, const char* what);

// Residual update of xr with y: gated for DiT blocks, plain add for refiner blocks.
void residual(Backend& be, const BlockView& b, const Tensor& xr, RowRange rows, const Tensor& y,
              const Tensor& gate);

// [rows, heads, head_dim] over a [rows, heads * head_dim] column view (row
// stride kept): the attention's view of Q, K or V columns.
Tensor as_heads(const Tensor& t, int64_t heads, int64_t head_dim);

// RoPE rows of `rows` (empty tensor when the block has no RoPE).
Tensor rope_rows(const BlockView& b, RowRange rows);

// The fused QKV of rows, ComfyUI's [rows, 3 * inner] (q | k | v): norm1 ->
// modulation -> QKV projection -> q/k RMSNorm + RoPE in place. The stock
// block's attention input; h3s kvbench --checkpoint captures a block's q, k,
// v with it.
OwnedTensor fused_qkv(Backend& be, Arena& arena, const BlockView& b, const Tensor& xr,
                      RowRange rows);

// Attention output rows -> out_proj -> residual into xr.
void attn_out(Backend& be, Arena& arena, const BlockView& b, const Tensor& xr, RowRange rows,
              const Tensor& attn);

// The MLP of rows: norm2 -> mod -> fc1 -> SwiGLU -> fc2 -> residual into xr.
void mlp(Backend& be, Arena& arena, const BlockView& b, const Tensor& xr, RowRange rows);

}  // namespace h3s::steps
