// Shared block steps (see block_steps.hpp).
#include "exec/block_steps.hpp"

namespace h3s {

BlockView BlockView::dit(const BlockWeights& w, const BlockContext& ctx) {
  BlockView b;
  b.norm1 = &w.norm1;
  b.norm2 = &w.norm2;
  b.attn = &w.attn;
  b.mlp = &w.mlp;
  b.mods = &ctx.mods;
  b.rope = ctx.rope;
  b.rot_dim = ctx.config->rope_dim;
  b.runs = &ctx.layout->mod_runs;
  b.heads = ctx.config->heads;
  b.head_dim = ctx.config->head_dim;
  b.eps = ctx.config->eps;
  b.block_index = ctx.block_index;
  return b;
}

BlockView BlockView::refiner(const RefinerBlockWeights& w, const ModelConfig& cfg) {
  BlockView b;
  b.norm1 = &w.norm1;
  b.norm2 = &w.norm2;
  b.attn = &w.attn;
  b.mlp = &w.mlp;
  b.heads = cfg.heads;
  b.head_dim = cfg.head_dim;
  b.eps = cfg.eps;
  return b;
}

namespace steps {

std::vector<ModRun> runs_for(const BlockView& b, RowRange rows) {
  std::vector<ModRun> out;
  if (!b.runs) return out;
  for (const ModRun& m : *b.runs) {
    const int64_t a = std::max(m.begin, rows.begin), e = std::min(m.end, rows.end);
    if (a < e) out.push_back({a - rows.begin, e - rows.begin, m.mod_row});
  }
  return out;
}

OwnedTensor norm_mod(Backend& be, Arena& arena, const BlockView& b, const Tensor& xr, RowRange rows,
                     const WeightArray<uint16_t>& norm, const ModTable* mod, const char* what) {
  H3S_CHECK(xr.rows() == rows.size());
  OwnedTensor h = arena.tensor(DType::bf16, {rows.size(), xr.cols()}, what);
  const std::vector<ModRun> runs = runs_for(b, rows);
  be.rms_norm_mod(xr, norm_tensor(norm), b.eps, b.mods ? mod : nullptr, runs, h.view);
  return h;
}

void residual(Backend& be, const BlockView& b, const Tensor& xr, RowRange rows, const Tensor& y,
              const Tensor& gate) {
  if (b.mods)
    be.gated_residual(xr, y, gate, runs_for(b, rows));
  else
    be.add_residual(xr, y);
}

Tensor as_heads(const Tensor& t, int64_t heads, int64_t head_dim) {
  Tensor v = t;
  v.rank = 3;
  v.shape = {t.rows(), heads, head_dim, 0};
  v.stride = {t.row_stride(), head_dim, 1, 0};
  return v;
}

Tensor rope_rows(const BlockView& b, RowRange rows) {
  if (b.rot_dim == 0 || !b.rope.data) return Tensor{};
  return b.rope.rows_view(rows.begin, rows.end);
}

OwnedTensor fused_qkv(Backend& be, Arena& arena, const BlockView& b, const Tensor& xr,
                      RowRange rows) {
  const int64_t inner = b.heads * b.head_dim;
  OwnedTensor h =
      norm_mod(be, arena, b, xr, rows, *b.norm1, b.mods ? &b.mods->msa : nullptr, "attn norm1+mod");
  OwnedTensor qkv = arena.tensor(DType::bf16, {rows.size(), 3 * inner}, "fused QKV");
  be.linear(h.view, b.attn->qkv, qkv.view);
  h.reset();
  const Tensor rope = rope_rows(b, rows);
  be.qk_norm_rope(qkv.view.cols_view(0, inner), norm_tensor(b.attn->q_norm), rope, b.eps,
                  b.rot_dim);
  be.qk_norm_rope(qkv.view.cols_view(inner, 2 * inner), norm_tensor(b.attn->k_norm), rope, b.eps,
                  b.rot_dim);
  return qkv;
}

void attn_out(Backend& be, Arena& arena, const BlockView& b, const Tensor& xr, RowRange rows,
              const Tensor& attn) {
  OwnedTensor o = arena.tensor(DType::bf16, {rows.size(), xr.cols()}, "attention out_proj");
  be.linear(attn, b.attn->out, o.view);
  residual(be, b, xr, rows, o.view, b.mods ? b.mods->gate_msa : Tensor{});
}

void mlp(Backend& be, Arena& arena, const BlockView& b, const Tensor& xr, RowRange rows) {
  OwnedTensor h =
      norm_mod(be, arena, b, xr, rows, *b.norm2, b.mods ? &b.mods->mlp : nullptr, "mlp norm2+mod");
  OwnedTensor f = arena.tensor(DType::bf16, {rows.size(), b.mlp->fc1.out}, "mlp fc1 output");
  be.linear(h.view, b.mlp->fc1, f.view);
  h.reset();
  OwnedTensor y = arena.tensor(DType::bf16, {rows.size(), xr.cols()}, "mlp fc2 output");
  be.swiglu_linear(f.view, b.mlp->fc2, y.view);
  f.reset();
  residual(be, b, xr, rows, y.view, b.mods ? b.mods->gate_mlp : Tensor{});
}

}  // namespace steps
}  // namespace h3s
