// The stock block: the whole sequence at once, materialising the fused QKV
// [seq, 3 * inner] and the MLP intermediates like ComfyUI's DiTBlock.
#include "exec/block.hpp"
#include "exec/block_steps.hpp"
#include "exec/exact_rows.hpp"
#include "kv/kv_store.hpp"
#include "kv/kv_tier_table.hpp"

namespace h3s {

void run_block_stock(Backend& be, Arena& arena, const BlockView& b, const Tensor& x,
                     BlockPhases phases, BlockKv block_kv) {
  const int64_t seq = x.rows(), inner = b.heads * b.head_dim;
  const RowRange all{0, seq};
  const auto mark = [&](Phase p) {
    if (b.block_index >= 0) arena.mark(b.block_index, p);
  };

  mark(Phase::kv);
  OwnedTensor qkv = steps::fused_qkv(be, arena, b, x, all);
  const Tensor q = qkv.view.cols_view(0, inner);
  const Tensor k = qkv.view.cols_view(inner, 2 * inner);

  mark(Phase::attn);
  // K and V straight out of the QKV buffer: [seq, heads, head_dim] views.
  auto heads_view = [&](int64_t col0) {
    return steps::as_heads(qkv.view.cols_view(col0, col0 + inner), b.heads, b.head_dim);
  };
  const KvView kv{heads_view(inner), heads_view(2 * inner)};
  OwnedTensor attn = arena.tensor(DType::bf16, {seq, inner}, "attention output");
  if (kv_tier_exact(block_kv.tier) || !be.has_kv_tier(block_kv.tier)) {
    AttnState state = AttnState::allocate(arena, seq, b.heads, b.head_dim);
    be.attention_with_ends(q, kv, all, state, {.fresh = true, .out = &attn.view});
  } else {
    // An approximate tier: every row through its store, as phase 1 and 2 of
    // the streamed block put them (one chunk of all rows).
    // exact_av_rows: those rows over the exact K/V first (the store rotates q).
    const std::vector<ExactRowsOut> exact =
        attend_exact_rows(be, arena, q, all, block_kv.exact_rows, kv, 0, b.heads, b.head_dim);
    const std::unique_ptr<KvStore> store = make_resident_kv_store(
        be, arena, block_kv.tier, seq, b.heads, b.head_dim, 0, block_kv.mix_heads);
    store->write(be, all, k, qkv.view.cols_view(2 * inner, 3 * inner));
    AttnState state = AttnState::allocate(arena, seq, b.heads, b.head_dim);
    be.attn_state_reset(state);
    const QueryChunk chunk{q, &state};
    store->attend(be, {&chunk, 1});
    store->finish(be, state, attn.view);
    paste_exact_rows(be, exact, attn.view);
  }
  qkv.reset();
  steps::attn_out(be, arena, b, x, all, attn.view);
  attn.reset();

  if (phases == BlockPhases::attn_only) return;
  mark(Phase::mlp);
  steps::mlp(be, arena, b, x, all);
}

}  // namespace h3s
