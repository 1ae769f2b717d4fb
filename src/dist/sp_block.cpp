// The sequence-parallel block (sp_block.hpp): the stock block's steps on
// this rank's rows around one of three attention exchanges.
#include "dist/sp_block.hpp"

#include <vector>

#include "dist/rank_split.hpp"
#include "exec/block_steps.hpp"

namespace h3s {

namespace {

// [rows, heads, head_dim] over a [rows, heads * head_dim] column view.
Tensor as_heads(const Tensor& t, int64_t heads, int64_t head_dim) {
  Tensor v = t;
  v.rank = 3;
  v.shape = {t.rows(), heads, head_dim, 0};
  v.stride = {t.row_stride(), head_dim, 1, 0};
  return v;
}

// K and V of a [keys, 2 * inner] buffer (K | V) as the attention's views.
KvView kv_heads(const Tensor& kv, int64_t heads, int64_t head_dim) {
  const int64_t inner = heads * head_dim;
  return {as_heads(kv.cols_view(0, inner), heads, head_dim),
          as_heads(kv.cols_view(inner, 2 * inner), heads, head_dim)};
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

// Ulysses. In: this rank's rows of the fused QKV [n, 3 * inner] (q/k norm
// and RoPE applied). Out: attn [n, inner], the attention of its rows for
// every head. In between, this rank attends every row for its heads.
void attend_ulysses(Backend& be, Arena& arena, Communicator& comm, const BlockView& b, int64_t seq,
                    const Tensor& qkv, const Tensor& attn) {
  const int ranks = comm.size(), me = comm.rank();
  const std::vector<RowRange> rows = split_rows(seq, ranks), heads = split_heads(b.heads, ranks);
  const int64_t n = rows[size_t(me)].size(), hd = b.head_dim, inner = b.heads * hd;
  const int64_t my_heads = heads[size_t(me)].size(), width = my_heads * hd;
  std::vector<SendBytes> send(static_cast<size_t>(ranks));
  std::vector<RecvBytes> recv(static_cast<size_t>(ranks));

  // To rank p: Q | K | V of p's heads for this rank's rows, [n, 3 * p's
  // width], packed peer after peer (each part contiguous, as NCCL sends).
  OwnedTensor by_head = arena.tensor(DType::bf16, {n * 3 * inner}, "ulysses Q,K,V out");
  int64_t at = 0;
  for (int p = 0; p < ranks; ++p) {
    const RowRange h = heads[size_t(p)];
    const int64_t w = h.size() * hd;
    const Tensor part = part_of(by_head, at, n, 3 * w);
    if (n > 0 && w > 0)
      for (int64_t s = 0; s < 3; ++s)  // Q, K, V
        be.copy(qkv.cols_view(s * inner + h.begin * hd, s * inner + h.end * hd),
                part.cols_view(s * w, (s + 1) * w));
    send[size_t(p)] = send_bytes(part);
    at += n * 3 * w;
  }
  // From rank s: its rows, so the parts land in sequence order.
  OwnedTensor mine = arena.tensor(DType::bf16, {seq, 3 * width}, "ulysses Q,K,V of my heads");
  for (int s = 0; s < ranks; ++s) recv[size_t(s)] = recv_bytes(rows_of(mine.view, rows[size_t(s)]));
  comm.all_to_all(send, recv);
  by_head.reset();

  // The stock block's attention call on a [seq, my_heads, head_dim] view:
  // per (row, head) the same tiles in the same order.
  OwnedTensor out = arena.tensor(DType::bf16, {seq, width}, "ulysses attention of my heads");
  if (width > 0) {
    AttnState state = AttnState::allocate(arena, seq, my_heads, hd);
    be.attention_with_ends(mine.view.cols_view(0, width),
                           kv_heads(mine.view.cols_view(width, 3 * width), my_heads, hd), {0, seq},
                           state, {.fresh = true, .out = &out.view});
  }
  mine.reset();

  // Back to rows: rank p gets its rows of this rank's heads; this rank gets
  // its rows of p's heads, [n, p's width], and puts them in p's columns.
  OwnedTensor by_row = arena.tensor(DType::bf16, {n * inner}, "ulysses attention in");
  at = 0;
  for (int p = 0; p < ranks; ++p) {
    const int64_t w = heads[size_t(p)].size() * hd;
    send[size_t(p)] = send_bytes(rows_of(out.view, rows[size_t(p)]));
    recv[size_t(p)] = recv_bytes(part_of(by_row, at, n, w));
    at += n * w;
  }
  comm.all_to_all(send, recv);
  at = 0;
  for (int p = 0; p < ranks; ++p) {
    const RowRange h = heads[size_t(p)];
    const int64_t w = h.size() * hd;
    if (n > 0 && w > 0)
      be.copy(part_of(by_row, at, n, w), attn.cols_view(h.begin * hd, h.end * hd));
    at += n * w;
  }
}

// K/V all-gather. In: this rank's Q [n, inner] and K | V [n, 2 * inner].
// Out: attn [n, inner] over the whole sequence's keys, gathered in order.
void attend_kv_gather(Backend& be, Arena& arena, Communicator& comm, const BlockView& b,
                      int64_t seq, const Tensor& q, const Tensor& kv, const Tensor& attn) {
  const int ranks = comm.size();
  const std::vector<RowRange> rows = split_rows(seq, ranks);
  const int64_t n = q.rows(), inner = b.heads * b.head_dim;
  OwnedTensor all = arena.tensor(DType::bf16, {seq, 2 * inner}, "gathered K,V");
  // An all-gather with uneven counts: the same bytes to every peer.
  const std::vector<SendBytes> send(size_t(ranks), send_bytes(kv));
  std::vector<RecvBytes> recv(static_cast<size_t>(ranks));
  for (int s = 0; s < ranks; ++s) recv[size_t(s)] = recv_bytes(rows_of(all.view, rows[size_t(s)]));
  comm.all_to_all(send, recv);
  if (n == 0) return;
  AttnState state = AttnState::allocate(arena, n, b.heads, b.head_dim);
  be.attention_with_ends(q, kv_heads(all.view, b.heads, b.head_dim), {0, seq}, state,
                         {.fresh = true, .out = &attn});
}

// A query chunk at this rank of the ring: its Q and state (received, or
// viewed in place when it is rank 0's own) and, at the last hop, where it
// finishes (the owner's attn rows, or a buffer to send home).
struct RingSlot {
  int64_t chunk = -1;
  Tensor q, out;
  OwnedTensor q_buffer, out_buffer;
  AttnState state;
};

// The ring. In: this rank's Q [n, inner] and K | V [n, 2 * inner] of its
// shard. Out: attn [n, inner]. One point-to-point group per step (before
// step t: what moves from step t - 1 and what step t needs), each side
// issuing its transfers in one order: outputs home, then the query chunk
// entering at rank 0, then the chunk passed to the next hop, so transfers
// between one pair of ranks always match.
void attend_ring(Backend& be, Arena& arena, Communicator& comm, const BlockView& b,
                 const RingPlan& plan, const Tensor& q, const Tensor& kv, const Tensor& attn) {
  const int me = comm.rank(), last = plan.hops - 1;
  if (me > last) return;  // no keys and no rows
  const RowRange own = plan.shards[size_t(me)];
  const int64_t hd = b.head_dim, inner = b.heads * hd;
  const int64_t chunks = int64_t(plan.chunks.size());
  const KvView shard = kv_heads(kv, b.heads, hd);
  const auto mine = [&](RowRange r) { return RowRange{r.begin - own.begin, r.end - own.begin}; };

  RingSlot held;  // the chunk attended in the previous step
  for (int64_t t = 0; t <= plan.steps(); ++t) {
    std::vector<PeerSend> sends;
    std::vector<PeerRecv> recvs;
    // 1. The chunk the last hop finished in step t - 1 goes home.
    const int64_t home = t - plan.hops;
    if (held.chunk >= 0 && me == last && plan.chunks[size_t(held.chunk)].owner != me)
      sends.push_back({plan.chunks[size_t(held.chunk)].owner, send_bytes(held.out)});
    if (home >= 0 && home < chunks && plan.chunks[size_t(home)].owner == me && me != last)
      recvs.push_back({last, recv_bytes(rows_of(attn, mine(plan.chunks[size_t(home)].rows)))});
    // 2. Chunk t enters the ring at rank 0 (rank 0's own chunks are views).
    if (t < chunks && plan.chunks[size_t(t)].owner == me && me != 0)
      sends.push_back({0, send_bytes(rows_of(q, mine(plan.chunks[size_t(t)].rows)))});
    // 3. Step t's chunk: entering (rank 0) or from the previous hop.
    RingSlot next;
    next.chunk = t < plan.steps() ? plan.chunk_at(me, t) : -1;
    if (next.chunk >= 0) {
      const RingPlan::Chunk& c = plan.chunks[size_t(next.chunk)];
      next.state = AttnState::allocate(arena, c.rows.size(), b.heads, hd);
      if (me == 0 && c.owner == 0) {
        next.q = rows_of(q, mine(c.rows));
      } else {
        next.q_buffer = arena.tensor(DType::bf16, {c.rows.size(), inner}, "ring query chunk");
        next.q = next.q_buffer.view;
        recvs.push_back({me == 0 ? c.owner : me - 1, recv_bytes(next.q)});
      }
      // Its state comes from the previous hop (rank 0 starts it fresh).
      if (me > 0)
        for (const OwnedTensor* s : {&next.state.m, &next.state.l, &next.state.acc})
          recvs.push_back({me - 1, recv_bytes(s->view)});
      if (me == last) {
        if (c.owner == me) {
          next.out = rows_of(attn, mine(c.rows));
        } else {
          next.out_buffer = arena.tensor(DType::bf16, {c.rows.size(), inner}, "ring chunk output");
          next.out = next.out_buffer.view;
        }
      }
    }
    // ... and the chunk attended in step t - 1 moves on: its Q, m, l, acc.
    if (held.chunk >= 0 && me < last)
      for (const Tensor* s :
           {&held.q, &held.state.m.view, &held.state.l.view, &held.state.acc.view})
        sends.push_back({me + 1, send_bytes(*s)});
    comm.exchange(sends, recvs);

    held = std::move(next);
    if (held.chunk >= 0)
      be.attention_with_ends(held.q, shard, {0, own.size()}, held.state,
                             {.fresh = me == 0, .out = me == last ? &held.out : nullptr});
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
  const int64_t n = rows.size(), inner = b.heads * b.head_dim;
  const auto mark = [&](Phase p) {
    if (b.block_index >= 0) arena.mark(b.block_index, p);
  };
  const Tensor rope = steps::rope_rows(b, rows);
  const auto norm1 = [&] {
    return steps::norm_mod(be, arena, b, xr, rows, *b.norm1, b.mods ? &b.mods->msa : nullptr,
                           "attn norm1+mod");
  };
  const auto qk_norm_rope = [&](const Tensor& t, const WeightArray<uint16_t>& w) {
    be.qk_norm_rope(t, norm_tensor(w), rope, b.eps, b.rot_dim);
  };

  mark(Phase::kv);
  OwnedTensor attn = arena.tensor(DType::bf16, {n, inner}, "attention output");
  if (o.attention == SpAttention::ulysses) {
    // The stock block's fused QKV, for this rank's rows.
    OwnedTensor qkv = n > 0 ? steps::fused_qkv(be, arena, b, xr, rows)
                            : arena.tensor(DType::bf16, {0, 3 * inner}, "fused QKV");
    mark(Phase::attn);
    attend_ulysses(be, arena, comm, b, seq, qkv.view, attn.view);
  } else {
    // Q and K | V in separate contiguous buffers (their rows travel): the
    // streamed block's feature-selected projections, the same bits.
    OwnedTensor q = arena.tensor(DType::bf16, {n, inner}, "query rows");
    OwnedTensor kv = arena.tensor(DType::bf16, {n, 2 * inner}, "K,V rows");
    if (n > 0) {
      OwnedTensor h = norm1();
      be.linear(h.view, b.attn->qkv, q.view, {0, inner});
      be.linear(h.view, b.attn->qkv, kv.view, {inner, 3 * inner});
      h.reset();
      qk_norm_rope(q.view, b.attn->q_norm);
      qk_norm_rope(kv.view.cols_view(0, inner), b.attn->k_norm);
    }
    mark(Phase::attn);
    if (o.attention == SpAttention::kv_gather)
      attend_kv_gather(be, arena, comm, b, seq, q.view, kv.view, attn.view);
    else
      attend_ring(be, arena, comm, b, RingPlan::make(seq, comm.size(), o.ring_q_chunk), q.view,
                  kv.view, attn.view);
  }
  if (n > 0) steps::attn_out(be, arena, b, xr, rows, attn.view);
  attn.reset();

  if (phases == BlockPhases::attn_only) return;
  mark(Phase::mlp);
  if (n > 0) steps::mlp(be, arena, b, xr, rows);
}

}  // namespace h3s
