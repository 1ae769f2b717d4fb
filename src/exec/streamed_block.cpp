// The streamed block (FEATURES.md): three phases over row chunks.
//  1. K/V build (kv_chunk rows): norm1 -> mod -> K,V projection -> k norm +
//     RoPE -> K/V store. Q is not computed here.
//  2. Attention (q_chunk rows, balanced, q_group chunks at a time): recompute
//     norm1 -> mod -> Q projection -> q norm + RoPE for each chunk of the
//     group, attend the group against the whole store, then per chunk
//     out-proj and gated residual into x in place. Rows of later chunks are
//     untouched until their own turn, so their recomputed Q sees the block's
//     input.
//  3. MLP (mlp_chunk rows): norm2 -> mod -> fc1 -> SwiGLU -> fc2 -> residual.
#include <algorithm>
#include <memory>
#include <vector>

#include "exec/block.hpp"
#include "exec/block_steps.hpp"
#include "exec/residual_rows.hpp"
#include "kv/kv_staged.hpp"
#include "kv/kv_store.hpp"

namespace h3s {

namespace {

// The order in which the phases below fetch x's rows, so a host-staged x
// copies each chunk in while the previous one computes.
std::vector<ResidualRows::Access> x_accesses(const std::vector<RowRange>& kv_chunks,
                                             const std::vector<RowRange>& q_chunks, size_t group,
                                             const std::vector<RowRange>& mlp_chunks) {
  std::vector<ResidualRows::Access> a;
  for (const RowRange& r : kv_chunks) a.push_back({r, true, false});
  for (size_t g0 = 0; g0 < q_chunks.size(); g0 += group) {
    const size_t g1 = std::min(q_chunks.size(), g0 + group);
    for (size_t i = g0; i < g1; ++i) a.push_back({q_chunks[i], true, false});  // Q
    for (size_t i = g0; i < g1; ++i) a.push_back({q_chunks[i], true, true});   // residual
  }
  for (const RowRange& r : mlp_chunks) a.push_back({r, true, true});
  return a;
}

}  // namespace

void run_block_streamed(Backend& be, Arena& arena, const BlockView& b, const Tensor& x,
                        const StreamChunks& c, BlockPhases phases) {
  ResidualRows rows(x);
  run_block_streamed(be, arena, b, rows, c, phases);
}

void run_block_streamed(Backend& be, Arena& arena, const BlockView& b, ResidualRows& x,
                        const StreamChunks& c, BlockPhases phases) {
  const int64_t seq = x.rows(), inner = b.heads * b.head_dim;
  const auto mark = [&](Phase p) {
    if (b.block_index >= 0) arena.mark(b.block_index, p);
    if (c.on_phase) c.on_phase(p);
  };

  mark(Phase::kv);
  std::unique_ptr<KvStore> store;
  if (c.kv_host && c.kv_queue) {
    if (c.kv_store != "bf16")
      fail(ErrorKind::invalid_argument,
           "host-staged K/V holds the exact bf16 tier only (kv_store '{}'): use kv_placement "
           "device with it",
           c.kv_store);
    store = std::make_unique<KvStagedStore>(arena, *c.kv_host, *c.kv_queue, seq, b.heads,
                                            b.head_dim, c.kv_block);
  } else {
    store = make_resident_kv_store(be, arena, c.kv_store, seq, b.heads, b.head_dim, c.kv_block);
  }
  const std::vector<RowRange> kv_chunks =
      ChunkPlan::fixed(seq, c.kv_chunk, c.merge_tail_below).chunks;
  const std::vector<RowRange> q_chunks = ChunkPlan::balanced(seq, c.q_chunk).chunks;
  const std::vector<RowRange> mlp_chunks =
      phases == BlockPhases::attn_only
          ? std::vector<RowRange>{}
          : ChunkPlan::fixed(seq, c.mlp_chunk, c.merge_tail_below).chunks;
  const size_t group = size_t(std::max<int64_t>(1, c.q_group));
  x.expect(x_accesses(kv_chunks, q_chunks, group, mlp_chunks));

  for (const RowRange& r : kv_chunks) {
    OwnedTensor h;
    {
      const ResidualRows::Lease xr = x.fetch(r);
      h = steps::norm_mod(be, arena, b, xr.view, r, *b.norm1, b.mods ? &b.mods->msa : nullptr,
                          "kv norm1+mod");
    }
    OwnedTensor kv = arena.tensor(DType::bf16, {r.size(), 2 * inner}, "kv chunk K,V");
    be.linear(h.view, b.attn->qkv, kv.view, {inner, 3 * inner});
    h.reset();
    const Tensor k = kv.view.cols_view(0, inner);
    be.qk_norm_rope(k, norm_tensor(b.attn->k_norm), steps::rope_rows(b, r), b.eps, b.rot_dim);
    store->write(be, r, k, kv.view.cols_view(inner, 2 * inner));
    store->keep_source(std::move(kv));
  }

  mark(Phase::attn);
  store->expect_passes(int64_t((q_chunks.size() + group - 1) / group));
  for (size_t g0 = 0; g0 < q_chunks.size(); g0 += group) {
    const size_t g1 = std::min(q_chunks.size(), g0 + group);
    struct Pending {
      OwnedTensor q;
      AttnState state;
    };
    std::vector<Pending> pending(g1 - g0);
    std::vector<QueryChunk> chunks;
    for (size_t i = g0; i < g1; ++i) {
      const RowRange r = q_chunks[i];
      Pending& p = pending[i - g0];
      OwnedTensor h;
      {
        const ResidualRows::Lease xr = x.fetch(r);
        h = steps::norm_mod(be, arena, b, xr.view, r, *b.norm1, b.mods ? &b.mods->msa : nullptr,
                            "attn norm1+mod");
      }
      p.q = arena.tensor(DType::bf16, {r.size(), inner}, "query chunk");
      be.linear(h.view, b.attn->qkv, p.q.view, {0, inner});
      h.reset();
      be.qk_norm_rope(p.q.view, norm_tensor(b.attn->q_norm), steps::rope_rows(b, r), b.eps,
                      b.rot_dim);
      p.state = AttnState::allocate(arena, r.size(), b.heads, b.head_dim);
      be.attn_state_reset(p.state);
      chunks.push_back({p.q.view, &p.state});
    }
    store->attend(be, chunks);
    for (size_t i = g0; i < g1; ++i) {
      const RowRange r = q_chunks[i];
      Pending& p = pending[i - g0];
      OwnedTensor attn = arena.tensor(DType::bf16, {r.size(), inner}, "attention chunk output");
      store->finish(be, p.state, attn.view);
      p = Pending{};
      const ResidualRows::Lease xr = x.fetch(r);
      steps::attn_out(be, arena, b, xr.view, r, attn.view);
      x.store(xr, r);
    }
  }
  store.reset();  // K/V are dead once every query chunk has attended

  if (phases == BlockPhases::attn_only) return;
  mark(Phase::mlp);
  for (const RowRange& r : mlp_chunks) {
    const ResidualRows::Lease xr = x.fetch(r);
    steps::mlp(be, arena, b, xr.view, r);
    x.store(xr, r);
  }
}

}  // namespace h3s
