// The kvmix K/V tier, resident (see kv_mix.hpp).
#include "kv/kv_mix.hpp"

#include <algorithm>

#include "kv/kv_fp4s.hpp"
#include "kv/kv_i8s.hpp"
#include "kvfmt/kvmix.hpp"

namespace h3s {

namespace {

// The columns of heads [h, h + n) of t [rows, heads * width].
Tensor head_cols(const Tensor& t, int64_t width, int64_t h, int64_t n) {
  return t.cols_view(h * width, (h + n) * width);
}

// Consecutive heads of `heads` (sorted) as [first, count) runs.
std::vector<std::array<int64_t, 2>> runs_of(const std::vector<int>& heads) {
  std::vector<std::array<int64_t, 2>> runs;
  for (const int h : heads) {
    if (!runs.empty() && runs.back()[0] + runs.back()[1] == h)
      ++runs.back()[1];
    else
      runs.push_back({h, 1});
  }
  return runs;
}

// Copies the part's heads of src into dst (gather) or back (scatter), each
// head `width` columns wide.
void move_heads(Backend& be, const std::vector<std::array<int64_t, 2>>& runs, int64_t width,
                const Tensor& all, const Tensor& part, bool gather) {
  int64_t at = 0;
  for (const auto& [h, n] : runs) {
    const Tensor a = head_cols(all, width, h, n), p = head_cols(part, width, at, n);
    if (gather)
      be.copy(a, p);
    else
      be.copy(p, a);
    at += n;
  }
}

// An [rows, heads, head_dim] accumulator as [rows, heads * head_dim].
Tensor flat(const Tensor& acc) {
  H3S_CHECK(acc.rank == 3 && acc.is_contiguous());
  return Tensor::contiguous(acc.data, acc.dtype, {acc.shape[0], acc.shape[1] * acc.shape[2]},
                            acc.device);
}

}  // namespace

KvMixStore::KvMixStore(Arena& arena, int64_t seq, int64_t heads, int64_t head_dim, int64_t kv_block,
                       std::span<const int> heads8)
    : arena_(arena), heads_(heads), head_dim_(head_dim) {
  kvmix::check_heads(heads8, heads);
  std::vector<bool> on8(size_t(heads), false);
  for (const int h : heads8) on8[size_t(h)] = true;
  Part i8s, fp4s;
  for (int h = 0; h < int(heads); ++h) (on8[size_t(h)] ? i8s : fp4s).heads.push_back(h);
  if (!i8s.heads.empty())
    i8s.store =
        std::make_unique<KvI8sStore>(arena, seq, int64_t(i8s.heads.size()), head_dim, kv_block);
  if (!fp4s.heads.empty())
    fp4s.store =
        std::make_unique<KvFp4sStore>(arena, seq, int64_t(fp4s.heads.size()), head_dim, kv_block);
  for (Part* p : {&i8s, &fp4s})
    if (p->store) {
      p->runs = runs_of(p->heads);
      parts_.push_back(std::move(*p));
    }
}

size_t KvMixStore::bytes(int64_t seq, int64_t heads, int64_t head_dim, int64_t heads8) {
  size_t b = 0;
  if (heads8 > 0) b += KvI8sStore::bytes(seq, heads8, head_dim);
  if (heads > heads8) b += KvFp4sStore::bytes(seq, heads - heads8, head_dim);
  return b;
}

size_t KvMixStore::chunk_bytes(int64_t rows, int64_t heads, int64_t head_dim, int64_t heads8) {
  // K and V gathered (2 x bf16), or the queries (bf16) and the state (fp32
  // accumulator, max and sum): the larger set's worth either way.
  const int64_t set = std::max(heads8, heads - heads8);
  return size_t(rows) * size_t(set) * (size_t(head_dim) * 6 + 8);
}

void KvMixStore::write(Backend& be, RowRange rows, const Tensor& k, const Tensor& v) {
  for (Part& p : parts_) {
    const int64_t cols = int64_t(p.heads.size()) * head_dim_;
    OwnedTensor kp =
        arena_.tensor(DType::bf16, {rows.size(), cols}, "K rows of a head set (kvmix)");
    OwnedTensor vp =
        arena_.tensor(DType::bf16, {rows.size(), cols}, "V rows of a head set (kvmix)");
    move_heads(be, p.runs, head_dim_, k, kp.view, true);
    move_heads(be, p.runs, head_dim_, v, vp.view, true);
    p.store->write(be, rows, kp.view, vp.view);
  }
}

void KvMixStore::attend(Backend& be, std::span<const QueryChunk> chunks) {
  for (const QueryChunk& c : chunks)
    for (Part& p : parts_) {
      const int64_t rows = c.q.rows(), n = int64_t(p.heads.size());
      OwnedTensor q =
          arena_.tensor(DType::bf16, {rows, n * head_dim_}, "queries of a head set (kvmix)");
      move_heads(be, p.runs, head_dim_, c.q, q.view, true);
      AttnState s = AttnState::allocate(arena_, rows, n, head_dim_);
      move_heads(be, p.runs, 1, c.state->m.view, s.m.view, true);
      move_heads(be, p.runs, 1, c.state->l.view, s.l.view, true);
      move_heads(be, p.runs, head_dim_, flat(c.state->acc.view), flat(s.acc.view), true);
      const QueryChunk part{q.view, &s};
      p.store->attend(be, {&part, 1});
      move_heads(be, p.runs, 1, c.state->m.view, s.m.view, false);
      move_heads(be, p.runs, 1, c.state->l.view, s.l.view, false);
      move_heads(be, p.runs, head_dim_, flat(c.state->acc.view), flat(s.acc.view), false);
    }
}

}  // namespace h3s
