// The sequence-parallel block (sp_block.hpp): the streamed block's chunked
// steps on this rank's rows around one of three attention exchanges.
//
// Order, as in streamed_block.cpp: a row's Q and K/V come from the block's
// input x, so each row's projections are made before its residual update.
// Every scheme makes all of its rank's K/V (and Ulysses its Q) before any
// residual; kv_gather and the ring make a query chunk's Q from rows that no
// residual has touched yet (their own rows, updated only when that chunk's
// attention is finished).
#include "dist/sp_block.hpp"

#include <algorithm>
#include <vector>

#include "dist/rank_split.hpp"
#include "exec/block_steps.hpp"

namespace h3s {

namespace {

// K and V of a [keys, 2 * inner] buffer (K | V) as the attention's views.
KvView kv_heads(const Tensor& kv, int64_t heads, int64_t head_dim) {
  const int64_t inner = heads * head_dim;
  return {steps::as_heads(kv.cols_view(0, inner), heads, head_dim),
          steps::as_heads(kv.cols_view(inner, 2 * inner), heads, head_dim)};
}

// A contiguous bf16 [rows, cols] view at element `offset` of `buf`: one
// peer's part of a packed exchange buffer.
Tensor part_of(const OwnedTensor& buf, int64_t offset, int64_t rows, int64_t cols) {
  return Tensor::contiguous(buf.view.ptr<uint16_t>() + offset, DType::bf16, {rows, cols},
                            buf.view.device);
}

Tensor rows_of(const Tensor& t, RowRange r) {
  return t.rows_view(r.begin, r.end);
}

// The chunks of rows `r` (absolute), as ChunkPlan cuts r.size() rows.
std::vector<RowRange> chunks_of(RowRange r, const ChunkPlan& plan) {
  std::vector<RowRange> out;
  for (const RowRange& c : plan.chunks) out.push_back({r.begin + c.begin, r.begin + c.end});
  return out;
}
std::vector<RowRange> fixed_chunks(RowRange r, int64_t chunk) {
  return chunks_of(r, ChunkPlan::fixed(r.size(), chunk));
}
std::vector<RowRange> balanced_chunks(RowRange r, int64_t chunk) {
  return chunks_of(r, ChunkPlan::balanced(r.size(), chunk));
}

// Rounds of a collective made per row chunk: in round j every rank handles
// chunk j of its rows (empty once its rows are used up), so all ranks make
// the same number of calls with matching counts.
struct ChunkRounds {
  std::vector<std::vector<RowRange>> per_rank;
  size_t rounds = 0;
  ChunkRounds(const std::vector<RowRange>& rows, int64_t chunk) {
    for (const RowRange& r : rows) {
      per_rank.push_back(fixed_chunks(r, chunk));
      rounds = std::max(rounds, per_rank.back().size());
    }
  }
  RowRange at(int rank, size_t round) const {
    const std::vector<RowRange>& c = per_rank[size_t(rank)];
    return round < c.size() ? c[round] : RowRange{};
  }
};

// One rank's block call: what the three attention schemes share.
struct RankBlock {
  Backend& be;
  Arena& arena;
  Communicator& comm;
  const BlockView& b;
  const Tensor& xr;  // rows `rows` of the residual
  RowRange rows;
  int64_t seq;
  const SpOptions& o;

  int64_t inner() const { return b.heads * b.head_dim; }
  // Absolute rows r of this rank's residual.
  Tensor x(RowRange r) const { return xr.rows_view(r.begin - rows.begin, r.end - rows.begin); }
  void mark(Phase p) const {
    if (b.block_index >= 0) arena.mark(b.block_index, p);
  }
  OwnedTensor norm1(RowRange r, const char* what) const {
    return steps::norm_mod(be, arena, b, x(r), r, *b.norm1, b.mods ? &b.mods->msa : nullptr, what);
  }
  // The streamed block's phase-1 step: K | V of rows r into kv [r, 2 * inner].
  void project_kv(RowRange r, const Tensor& kv) const {
    OwnedTensor h = norm1(r, "kv norm1+mod");
    be.linear(h.view, b.attn->qkv, kv, {inner(), 3 * inner()});
    h.reset();
    be.qk_norm_rope(kv.cols_view(0, inner()), norm_tensor(b.attn->k_norm), steps::rope_rows(b, r),
                    b.eps, b.rot_dim);
  }
  // The streamed block's query step: Q of rows r, [r, inner].
  OwnedTensor project_q(RowRange r) const {
    OwnedTensor h = norm1(r, "attn norm1+mod");
    OwnedTensor q = arena.tensor(DType::bf16, {r.size(), inner()}, "query chunk");
    be.linear(h.view, b.attn->qkv, q.view, {0, inner()});
    h.reset();
    be.qk_norm_rope(q.view, norm_tensor(b.attn->q_norm), steps::rope_rows(b, r), b.eps, b.rot_dim);
    return q;
  }
  // Out-projection and gated residual of rows r from their attention rows.
  void finish(RowRange r, const Tensor& attn) const {
    steps::attn_out(be, arena, b, x(r), r, attn);
  }
};

// Ulysses. Per kv_chunk round, every rank makes the fused QKV of one chunk of
// its rows (the stock block's step) and sends each peer the Q | K | V of that
// peer's heads; a rank so gathers Q, K, V of its heads for every row,
// [seq, 3 * width] (the scheme's inherent buffer: per round only one chunk's
// projection and send buffer live beside it). It attends q_chunk rows at a
// time over all the keys, each finished chunk taking its rows' place in Q's
// columns (so no [seq, width] output beside them), then per q_chunk round
// sends each peer its rows of this rank's heads, and out-projects the rows it
// got back.
void ulysses(const RankBlock& rb) {
  Backend& be = rb.be;
  Arena& arena = rb.arena;
  const int ranks = rb.comm.size(), me = rb.comm.rank();
  const std::vector<RowRange> rows = split_rows(rb.seq, ranks);
  const std::vector<RowRange> heads = split_heads(rb.b.heads, ranks);
  const int64_t hd = rb.b.head_dim, inner = rb.inner();
  const int64_t my_heads = heads[size_t(me)].size(), width = my_heads * hd;
  std::vector<SendBytes> send(static_cast<size_t>(ranks));
  std::vector<RecvBytes> recv(static_cast<size_t>(ranks));

  OwnedTensor mine = arena.tensor(DType::bf16, {rb.seq, 3 * width}, "ulysses Q,K,V of my heads");
  const ChunkRounds in(rows, rb.o.kv_chunk);
  for (size_t j = 0; j < in.rounds; ++j) {
    // To rank p: Q | K | V of p's heads for this chunk, [c, 3 * p's width],
    // packed peer after peer (each part contiguous, as NCCL sends).
    const RowRange c = in.at(me, j);
    OwnedTensor by_head = arena.tensor(DType::bf16, {c.size() * 3 * inner}, "ulysses Q,K,V out");
    {
      OwnedTensor qkv;
      if (c.size() > 0) qkv = steps::fused_qkv(be, arena, rb.b, rb.x(c), c);
      int64_t at = 0;
      for (int p = 0; p < ranks; ++p) {
        const RowRange h = heads[size_t(p)];
        const int64_t w = h.size() * hd;
        const Tensor part = part_of(by_head, at, c.size(), 3 * w);
        if (c.size() > 0 && w > 0)
          for (int64_t s = 0; s < 3; ++s)  // Q, K, V
            be.copy(qkv.view.cols_view(s * inner + h.begin * hd, s * inner + h.end * hd),
                    part.cols_view(s * w, (s + 1) * w));
        send[size_t(p)] = send_bytes(part);
        at += c.size() * 3 * w;
      }
    }
    // From rank s: its chunk j, which lands at its rows (sequence order).
    for (int s = 0; s < ranks; ++s) recv[size_t(s)] = recv_bytes(rows_of(mine.view, in.at(s, j)));
    rb.comm.all_to_all(send, recv);
  }

  // The stock block's attention on a [rows, my_heads, head_dim] view, per
  // query chunk with a fresh state: per (row, head) the same tiles in the
  // same order whatever the chunk.
  rb.mark(Phase::attn);
  const Tensor q_cols = mine.view.cols_view(0, width);
  if (width > 0) {
    const KvView kv = kv_heads(mine.view.cols_view(width, 3 * width), my_heads, hd);
    for (const RowRange& q : balanced_chunks({0, rb.seq}, rb.o.q_chunk)) {
      OwnedTensor out = arena.tensor(DType::bf16, {q.size(), width}, "ulysses attention chunk");
      {
        AttnState state = AttnState::allocate(arena, q.size(), my_heads, hd);
        be.attention_with_ends(rows_of(q_cols, q), kv, {0, rb.seq}, state,
                               {.fresh = true, .out = &out.view});
      }
      // This chunk's Q is spent and later chunks read only their own rows.
      be.copy(out.view, rows_of(q_cols, q));
    }
  }

  // Back to rows: rank p gets its chunk j of this rank's heads; this rank
  // gets its chunk j of p's heads, [c, p's width], puts them in p's columns
  // and out-projects the chunk.
  const ChunkRounds back(rows, rb.o.q_chunk);
  for (size_t j = 0; j < back.rounds; ++j) {
    const RowRange c = back.at(me, j);
    int64_t out_rows = 0;
    for (int p = 0; p < ranks; ++p) out_rows += back.at(p, j).size();
    OwnedTensor by_row = arena.tensor(DType::bf16, {out_rows * width}, "ulysses attention out");
    OwnedTensor got = arena.tensor(DType::bf16, {c.size() * inner}, "ulysses attention in");
    int64_t at = 0, got_at = 0;
    for (int p = 0; p < ranks; ++p) {
      const RowRange pc = back.at(p, j);
      const Tensor part = part_of(by_row, at, pc.size(), width);
      if (pc.size() > 0 && width > 0) be.copy(rows_of(q_cols, pc), part);
      send[size_t(p)] = send_bytes(part);
      at += pc.size() * width;
      const int64_t w = heads[size_t(p)].size() * hd;
      recv[size_t(p)] = recv_bytes(part_of(got, got_at, c.size(), w));
      got_at += c.size() * w;
    }
    rb.comm.all_to_all(send, recv);
    by_row.reset();
    if (c.size() == 0) continue;
    OwnedTensor attn = arena.tensor(DType::bf16, {c.size(), inner}, "attention chunk output");
    got_at = 0;
    for (int p = 0; p < ranks; ++p) {
      const RowRange h = heads[size_t(p)];
      const int64_t w = h.size() * hd;
      if (w > 0)
        be.copy(part_of(got, got_at, c.size(), w), attn.view.cols_view(h.begin * hd, h.end * hd));
      got_at += c.size() * w;
    }
    got.reset();
    rb.finish(c, attn.view);
  }
}

// K/V all-gather. Each rank makes its rows' K/V per kv_chunk straight into
// its rows of the gathered buffer [seq, 2 * inner] (the scheme's inherent
// buffer) and sends them to every peer; then, per q_chunk of its rows, makes
// the chunk's Q, attends it over the whole sequence's keys in order and
// out-projects it.
void kv_gather(const RankBlock& rb) {
  const int ranks = rb.comm.size(), me = rb.comm.rank();
  const std::vector<RowRange> rows = split_rows(rb.seq, ranks);
  const int64_t inner = rb.inner();
  OwnedTensor all = rb.arena.tensor(DType::bf16, {rb.seq, 2 * inner}, "gathered K,V");
  for (const RowRange& c : fixed_chunks(rb.rows, rb.o.kv_chunk))
    rb.project_kv(c, rows_of(all.view, c));

  rb.mark(Phase::attn);
  // An all-gather with uneven counts, in place: this rank's rows to every
  // peer, nothing to itself (its rows are already there).
  std::vector<SendBytes> send(static_cast<size_t>(ranks));
  std::vector<RecvBytes> recv(static_cast<size_t>(ranks));
  for (int p = 0; p < ranks; ++p)
    if (p != me) {
      send[size_t(p)] = send_bytes(rows_of(all.view, rb.rows));
      recv[size_t(p)] = recv_bytes(rows_of(all.view, rows[size_t(p)]));
    }
  rb.comm.all_to_all(send, recv);

  const KvView kv = kv_heads(all.view, rb.b.heads, rb.b.head_dim);
  for (const RowRange& c : balanced_chunks(rb.rows, rb.o.q_chunk)) {
    OwnedTensor attn = rb.arena.tensor(DType::bf16, {c.size(), inner}, "attention chunk output");
    {
      const OwnedTensor q = rb.project_q(c);
      AttnState state = AttnState::allocate(rb.arena, c.size(), rb.b.heads, rb.b.head_dim);
      rb.be.attention_with_ends(q.view, kv, {0, rb.seq}, state, {.fresh = true, .out = &attn.view});
    }
    rb.finish(c, attn.view);
  }
}

// A query chunk at this rank of the ring: its Q and state (received, or made
// here when it is rank 0's own) and, at the last hop, where it finishes.
struct RingSlot {
  int64_t chunk = -1;
  OwnedTensor q, out;
  AttnState state;
};

// The ring. Each rank makes its shard's K/V per kv_chunk, [n, 2 * inner]
// (the scheme's inherent buffer). One point-to-point group per step (before
// step t: what moves from step t - 1 and what step t needs), each side
// issuing its transfers in one order: outputs home, then the query chunk
// entering at rank 0, then the chunk passed to the next hop, so transfers
// between one pair of ranks always match. The owner makes a chunk's Q when
// it enters (step c) and out-projects its output when it comes home (after
// step c + hops - 1), so a rank holds a few chunks' Q, state and output.
void ring(const RankBlock& rb) {
  Backend& be = rb.be;
  Arena& arena = rb.arena;
  const RingPlan plan = RingPlan::make(rb.seq, rb.comm.size(), rb.o.ring_q_chunk);
  const int me = rb.comm.rank(), last = plan.hops - 1;
  const int64_t hd = rb.b.head_dim, inner = rb.inner();
  OwnedTensor kv = arena.tensor(DType::bf16, {rb.rows.size(), 2 * inner}, "K,V shard");
  for (const RowRange& c : fixed_chunks(rb.rows, rb.o.kv_chunk))
    rb.project_kv(c, kv.view.rows_view(c.begin - rb.rows.begin, c.end - rb.rows.begin));

  rb.mark(Phase::attn);
  if (me > last) return;  // no keys and no rows
  const int64_t chunks = int64_t(plan.chunks.size());
  const KvView shard = kv_heads(kv.view, rb.b.heads, hd);
  const auto chunk = [&](int64_t c) -> const RingPlan::Chunk& { return plan.chunks[size_t(c)]; };

  RingSlot held;  // the chunk attended in the previous step
  for (int64_t t = 0; t <= plan.steps(); ++t) {
    std::vector<PeerSend> sends;
    std::vector<PeerRecv> recvs;
    // 1. The chunk the last hop finished in step t - 1 goes home.
    const int64_t home = t - plan.hops;
    if (held.chunk >= 0 && me == last && chunk(held.chunk).owner != me)
      sends.push_back({chunk(held.chunk).owner, send_bytes(held.out.view)});
    OwnedTensor arrived;
    if (home >= 0 && home < chunks && chunk(home).owner == me && me != last) {
      arrived = arena.tensor(DType::bf16, {chunk(home).rows.size(), inner}, "ring chunk output");
      recvs.push_back({last, recv_bytes(arrived.view)});
    }
    // 2. Chunk t enters the ring at rank 0 (rank 0 makes its own in place).
    OwnedTensor entering;
    if (t < chunks && chunk(t).owner == me && me != 0) {
      entering = rb.project_q(chunk(t).rows);
      sends.push_back({0, send_bytes(entering.view)});
    }
    // 3. Step t's chunk: entering (rank 0) or from the previous hop.
    RingSlot next;
    next.chunk = t < plan.steps() ? plan.chunk_at(me, t) : -1;
    if (next.chunk >= 0) {
      const RingPlan::Chunk& c = chunk(next.chunk);
      next.state = AttnState::allocate(arena, c.rows.size(), rb.b.heads, hd);
      if (me == 0 && c.owner == 0) {
        next.q = rb.project_q(c.rows);
      } else {
        next.q = arena.tensor(DType::bf16, {c.rows.size(), inner}, "ring query chunk");
        recvs.push_back({me == 0 ? c.owner : me - 1, recv_bytes(next.q.view)});
      }
      // Its state comes from the previous hop (rank 0 starts it fresh).
      if (me > 0)
        for (const OwnedTensor* s : {&next.state.m, &next.state.l, &next.state.acc})
          recvs.push_back({me - 1, recv_bytes(s->view)});
      if (me == last)
        next.out = arena.tensor(DType::bf16, {c.rows.size(), inner}, "ring chunk output");
    }
    // ... and the chunk attended in step t - 1 moves on: its Q, m, l, acc.
    if (held.chunk >= 0 && me < last)
      for (const OwnedTensor* s : {&held.q, &held.state.m, &held.state.l, &held.state.acc})
        sends.push_back({me + 1, send_bytes(s->view)});
    rb.comm.exchange(sends, recvs);
    entering.reset();
    if (arrived) rb.finish(chunk(home).rows, arrived.view);
    arrived.reset();

    held = std::move(next);
    if (held.chunk < 0) continue;
    be.attention_with_ends(held.q.view, shard, {0, rb.rows.size()}, held.state,
                           {.fresh = me == 0, .out = me == last ? &held.out.view : nullptr});
    if (me == last && chunk(held.chunk).owner == me) {
      rb.finish(chunk(held.chunk).rows, held.out.view);
      held.out.reset();
    }
  }
}

}  // namespace

RowRange sp_rows(SpAttention attention, int64_t seq, int ranks, int rank) {
  if (rank < 0 || rank >= ranks)
    fail(ErrorKind::invalid_argument, "sequence parallel: rank {} outside a group of {} ranks",
         rank, ranks);
  const std::vector<RowRange> rows =
      attention == SpAttention::ring ? split_key_tiles(seq, ranks) : split_rows(seq, ranks);
  return rows[size_t(rank)];
}

void run_block_sp(Backend& be, Arena& arena, Communicator& comm, const BlockView& b,
                  const Tensor& xr, int64_t seq, const SpOptions& o, BlockPhases phases) {
  const RowRange rows = sp_rows(o.attention, seq, comm.size(), comm.rank());
  if (xr.rows() != rows.size())
    fail(ErrorKind::invalid_argument,
         "sequence parallel: rank {} of {} holds rows [{}, {}) of {}: x has {} rows, expected {}",
         comm.rank(), comm.size(), rows.begin, rows.end, seq, xr.rows(), rows.size());
  const RankBlock rb{be, arena, comm, b, xr, rows, seq, o};
  rb.mark(Phase::kv);
  switch (o.attention) {
    case SpAttention::ulysses:
      ulysses(rb);
      break;
    case SpAttention::kv_gather:
      kv_gather(rb);
      break;
    case SpAttention::ring:
      ring(rb);
      break;
  }

  if (phases == BlockPhases::attn_only) return;
  rb.mark(Phase::mlp);
  for (const RowRange& c : fixed_chunks(rows, o.mlp_chunk)) steps::mlp(be, arena, b, rb.x(c), c);
}

}  // namespace h3s
