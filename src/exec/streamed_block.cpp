// The streamed block (docs/FEATURES.md "The streamed block"): three phases
// over row chunks.
//  1. K/V build (kv_chunk rows): norm1 -> mod -> K,V projection -> k norm +
//     RoPE -> K/V store. Q is not computed here.
//  2. Attention (q_chunk rows, balanced, q_group chunks at a time): recompute
//     norm1 -> mod -> Q projection -> q norm + RoPE for each chunk of the
//     group, attend the group against the whole store, then per chunk
//     out-proj and gated residual into x in place. Rows of later chunks are
//     untouched until their own turn, so their recomputed Q sees the block's
//     input.
//  3. MLP (mlp_chunk rows): norm2 -> mod -> fc1 -> SwiGLU -> fc2 -> residual.
//
// With host-staged K/V (StreamChunks::kv_first_pass) the first query group
// makes its Q before phase 1 and attends each K/V chunk from phase 1's own
// buffer as it is made: its pass needs no copy in, and phase 1's copies out
// run under its attention instead of holding phase 2 back. The keys arrive in
// the same order, in ranges that start on attention tiles, so every bit is
// the same.
#include <algorithm>
#include <memory>
#include <vector>

#include "exec/block.hpp"
#include "exec/block_steps.hpp"
#include "exec/exact_rows.hpp"
#include "exec/residual_rows.hpp"
#include "kv/kv_bf16.hpp"
#include "kv/kv_staged.hpp"
#include "kv/kv_store.hpp"
#include "kv/kv_tier_table.hpp"

namespace h3s {

namespace {

// The order in which the phases below fetch x's rows, so a host-staged x
// copies each chunk in while the previous one computes. A group of one
// keeps its rows leased from Q to the residual (one fetch), except a group
// attended during phase 1, whose fetches come between.
std::vector<ResidualRows::Access> x_accesses(const std::vector<RowRange>& kv_chunks,
                                             const std::vector<RowRange>& q_chunks, size_t group,
                                             bool first_in_phase1,
                                             const std::vector<RowRange>& mlp_chunks) {
  std::vector<ResidualRows::Access> a;
  const auto q_group = [&](size_t g0, bool in_phase1) {
    const size_t g1 = std::min(q_chunks.size(), g0 + group);
    if (group == 1 && !in_phase1) {
      a.push_back({q_chunks[g0], true, true});
      return;
    }
    for (size_t i = g0; i < g1; ++i) a.push_back({q_chunks[i], true, false});  // Q
    if (in_phase1)
      for (const RowRange& r : kv_chunks) a.push_back({r, true, false});
    for (size_t i = g0; i < g1; ++i) a.push_back({q_chunks[i], true, true});  // residual
  };
  if (!first_in_phase1)
    for (const RowRange& r : kv_chunks) a.push_back({r, true, false});
  for (size_t g0 = 0; g0 < q_chunks.size(); g0 += group) q_group(g0, first_in_phase1 && g0 == 0);
  for (const RowRange& r : mlp_chunks) a.push_back({r, true, true});
  return a;
}

// One pass's query chunks: Q, the online-softmax state and (a group of one
// outside phase 1) its rows of x, leased from Q to the residual.
struct QueryGroup {
  struct Pending {
    OwnedTensor q;
    AttnState state;
    ResidualRows::Lease x;
    std::vector<ExactRowsOut> exact;  // exact_av_rows: its rows over the exact K/V
  };
  size_t begin = 0, end = 0;  // of q_chunks
  std::vector<Pending> pending;
  std::vector<QueryChunk> chunks;
};

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

  const std::vector<RowRange> kv_chunks =
      ChunkPlan::fixed(seq, c.kv_chunk, c.merge_tail_below).chunks;
  const std::vector<RowRange> q_chunks = ChunkPlan::balanced(seq, c.q_chunk).chunks;
  const std::vector<RowRange> mlp_chunks =
      phases == BlockPhases::attn_only
          ? std::vector<RowRange>{}
          : ChunkPlan::fixed(seq, c.mlp_chunk, c.merge_tail_below).chunks;
  const size_t group = size_t(std::max<int64_t>(1, c.q_group));
  const bool staged = c.kv_host && c.kv_queue;
  const bool first_in_phase1 =
      staged && c.kv_first_pass && !q_chunks.empty() &&
      std::all_of(kv_chunks.begin(), kv_chunks.end(),
                  [](const RowRange& r) { return r.begin % kAttnKvTile == 0; });
  x.expect(x_accesses(kv_chunks, q_chunks, group, first_in_phase1, mlp_chunks));

  // Q and a reset state for q_chunks [g0, g0 + group).
  const auto prepare = [&](size_t g0, bool hold_x) {
    QueryGroup g;
    g.begin = g0;
    g.end = std::min(q_chunks.size(), g0 + group);
    g.pending.resize(g.end - g.begin);
    for (size_t i = g.begin; i < g.end; ++i) {
      const RowRange r = q_chunks[i];
      QueryGroup::Pending& p = g.pending[i - g.begin];
      OwnedTensor h;
      {
        ResidualRows::Lease xr = x.fetch(r);
        h = steps::norm_mod(be, arena, b, xr.view, r, *b.norm1, b.mods ? &b.mods->msa : nullptr,
                            "attn norm1+mod");
        if (hold_x) p.x = std::move(xr);
      }
      p.q = arena.tensor(DType::bf16, {r.size(), inner}, "query chunk");
      be.linear(h.view, b.attn->qkv, p.q.view, {0, inner});
      h.reset();
      be.qk_norm_rope(p.q.view, norm_tensor(b.attn->q_norm), steps::rope_rows(b, r), b.eps,
                      b.rot_dim);
      p.state = AttnState::allocate(arena, r.size(), b.heads, b.head_dim);
      be.attn_state_reset(p.state);
    }
    for (QueryGroup::Pending& p : g.pending) g.chunks.push_back({p.q.view, &p.state});
    return g;
  };
  // Out-proj and gated residual for each chunk of an attended group.
  const auto finish = [&](QueryGroup& g, KvStore& store) {
    for (size_t i = g.begin; i < g.end; ++i) {
      const RowRange r = q_chunks[i];
      QueryGroup::Pending& p = g.pending[i - g.begin];
      OwnedTensor attn = arena.tensor(DType::bf16, {r.size(), inner}, "attention chunk output");
      store.finish(be, p.state, attn.view);
      paste_exact_rows(be, p.exact, attn.view);
      const ResidualRows::Lease xr = p.x.view.data ? std::move(p.x) : x.fetch(r);
      p = QueryGroup::Pending{};
      steps::attn_out(be, arena, b, xr.view, r, attn.view);
      x.store(xr, r);
    }
  };

  mark(Phase::kv);
  std::unique_ptr<KvStore> store;
  if (staged) {
    if (!kv_tier_exact(c.kv_store))
      fail(ErrorKind::invalid_argument,
           "host-staged K/V holds the exact bf16 tier only (kv_store '{}'): use kv_placement "
           "device with it",
           kv_tier_name(c.kv_store));
    store = std::make_unique<KvStagedStore>(arena, *c.kv_host, *c.kv_queue, seq, b.heads,
                                            b.head_dim, c.kv_block);
  } else {
    store = make_resident_kv_store(be, arena, c.kv_store, seq, b.heads, b.head_dim, c.kv_block,
                                   c.kv_mix_heads);
  }
  // exact_av_rows beside an approximate store: the exact bf16 K/V kept too.
  std::unique_ptr<KvBf16Store> exact;
  if (!c.exact_rows.empty() && !store->exact())
    exact = std::make_unique<KvBf16Store>(arena, seq, b.heads, b.head_dim, c.kv_block);
  QueryGroup first;
  if (first_in_phase1) first = prepare(0, false);
  for (const RowRange& r : kv_chunks) {
    OwnedTensor h;
    {
      const ResidualRows::Lease xr = x.fetch(r);
      h = steps::norm_mod(be, arena, b, xr.view, r, *b.norm1, b.mods ? &b.mods->msa : nullptr,
                          "kv norm1+mod");
    }
    // The first group's state holds the memory a second chunk buffer would.
    if (first_in_phase1) store->release_source();
    OwnedTensor kv = arena.tensor(DType::bf16, {r.size(), 2 * inner}, "kv chunk K,V");
    be.linear(h.view, b.attn->qkv, kv.view, {inner, 3 * inner});
    h.reset();
    const Tensor k = kv.view.cols_view(0, inner), v = kv.view.cols_view(inner, 2 * inner);
    be.qk_norm_rope(k, norm_tensor(b.attn->k_norm), steps::rope_rows(b, r), b.eps, b.rot_dim);
    store->write(be, r, k, v);
    if (exact) exact->write(be, r, k, v);
    if (first_in_phase1) {
      const KvView kv_rows{steps::as_heads(k, b.heads, b.head_dim),
                           steps::as_heads(v, b.heads, b.head_dim)};
      for (const QueryChunk& q : first.chunks) be.attention(q.q, kv_rows, {0, r.size()}, *q.state);
    }
    store->keep_source(std::move(kv));
  }

  mark(Phase::attn);
  const size_t passes = (q_chunks.size() + group - 1) / group;
  store->expect_passes(int64_t(passes) - (first_in_phase1 ? 1 : 0));
  if (first_in_phase1) finish(first, *store);
  for (size_t g0 = first_in_phase1 ? group : 0; g0 < q_chunks.size(); g0 += group) {
    QueryGroup g = prepare(g0, group == 1);
    if (exact)  // before the store's attend, which may rotate the queries in place
      for (size_t i = g.begin; i < g.end; ++i)
        g.pending[i - g.begin].exact =
            attend_exact_rows(be, arena, g.pending[i - g.begin].q.view, q_chunks[i], c.exact_rows,
                              exact->view(), c.kv_block, b.heads, b.head_dim);
    store->attend(be, g.chunks);
    finish(g, *store);
  }
  store.reset();  // K/V are dead once every query chunk has attended
  exact.reset();

  if (phases == BlockPhases::attn_only) return;
  mark(Phase::mlp);
  for (const RowRange& r : mlp_chunks) {
    const ResidualRows::Lease xr = x.fetch(r);
    steps::mlp(be, arena, b, xr.view, r);
    x.store(xr, r);
  }
}

}  // namespace h3s
