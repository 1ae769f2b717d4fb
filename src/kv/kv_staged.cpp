// The exact bf16 K/V store in host staging memory (see kv_staged.hpp).
#include "kv/kv_staged.hpp"

#include <algorithm>

namespace h3s {

KvStagedStore::KvStagedStore(Arena& device, Arena& host, StageQueue& queue, int64_t seq,
                             int64_t heads, int64_t head_dim, int64_t kv_block)
    : device_(device),
      queue_(queue),
      seq_(seq),
      heads_(heads),
      head_dim_(head_dim),
      kv_block_(kv_block) {
  if (kv_block <= 0 || kv_block % kAttnKvTile != 0)
    fail(ErrorKind::invalid_argument,
         "host-staged K/V: kv_block = {} must be a positive multiple of the {}-key attention "
         "tile (try {})",
         kv_block, kAttnKvTile,
         std::max<int64_t>(1, (kv_block + kAttnKvTile - 1) / kAttnKvTile) * kAttnKvTile);
  k_ = host.tensor(DType::bf16, {seq, heads * head_dim}, "K store (host-staged)");
  v_ = host.tensor(DType::bf16, {seq, heads * head_dim}, "V store (host-staged)");
}

size_t KvStagedStore::tile_bytes(int64_t kv_block, int64_t heads, int64_t head_dim) {
  return size_t(2 /*slots*/ * 2 /*K, V*/) * size_t(kv_block * heads * head_dim) * 2;
}

size_t KvStagedStore::host_bytes(int64_t seq, int64_t heads, int64_t head_dim) {
  return size_t(2) * size_t(seq * heads * head_dim) * 2;
}

void KvStagedStore::write(Backend&, RowRange rows, const Tensor& k, const Tensor& v) {
  queue_.to_host(k, k_.view.rows_view(rows.begin, rows.end));
  written_ = queue_.to_host(v, v_.view.rows_view(rows.begin, rows.end));
}

void KvStagedStore::keep_source(OwnedTensor&& buffer) {
  // The previous chunk's buffer returns to the arena once its copies have run
  // (ops issued from here on wait for them, not the copies of this chunk).
  if (source_) queue_.wait(source_read_);
  source_ = std::move(buffer);
  source_read_ = written_;
}

void KvStagedStore::finish_phase1() {
  if (!source_) return;
  queue_.wait(source_read_);
  source_.reset();
}

void KvStagedStore::allocate_tiles() {
  const int64_t inner = heads_ * head_dim_, rows = std::min(kv_block_, seq_);
  for (Tile& t : tiles_)
    if (!t.k) {
      t.k = device_.tensor(DType::bf16, {rows, inner}, "K/V staging tile (K)");
      t.v = device_.tensor(DType::bf16, {rows, inner}, "K/V staging tile (V)");
    }
}

// The copy starts after the work issued so far, which includes the last
// reads of that tile (two blocks earlier).
StageQueue::Ticket KvStagedStore::fetch(int64_t j, int slot) {
  const int64_t b = j * kv_block_, e = std::min(seq_, b + kv_block_);
  const Tile& t = tiles_[slot];
  queue_.to_device(k_.view.rows_view(b, e), t.k.view.rows_view(0, e - b));
  return queue_.to_device(v_.view.rows_view(b, e), t.v.view.rows_view(0, e - b));
}

void KvStagedStore::expect_passes(int64_t passes) {
  passes_left_ = passes;
  if (passes <= 0 || first_ready_ != 0) return;
  finish_phase1();
  allocate_tiles();
  first_ready_ = fetch(0, next_slot_);
}

void KvStagedStore::attend(Backend& backend, std::span<const QueryChunk> chunks) {
  finish_phase1();
  allocate_tiles();
  const int64_t inner = heads_ * head_dim_;
  const int64_t blocks = (seq_ + kv_block_ - 1) / kv_block_;
  if (passes_left_ > 0) --passes_left_;
  StageQueue::Ticket ready = first_ready_ != 0 ? first_ready_ : fetch(0, next_slot_);
  first_ready_ = 0;
  for (int64_t j = 0; j < blocks; ++j) {
    const int slot = next_slot_;
    next_slot_ = 1 - next_slot_;
    // Block j + 1, or the next pass's block 0, into the other tile.
    StageQueue::Ticket next = 0;
    if (j + 1 < blocks)
      next = fetch(j + 1, next_slot_);
    else if (passes_left_ > 0)
      first_ready_ = fetch(0, next_slot_);
    queue_.wait(ready);
    const int64_t n = std::min(seq_, (j + 1) * kv_block_) - j * kv_block_;
    const Tile& t = tiles_[slot];
    // [n, heads, head_dim] over the seq-major tile; the tile's key 0 is key
    // j * kv_block, a tile boundary, so the kernel's 128-key tiles coincide.
    auto as_kv = [&](const Tensor& s) {
      Tensor v = s.rows_view(0, n);
      v.rank = 3;
      v.shape = {n, heads_, head_dim_, 0};
      v.stride = {inner, head_dim_, 1, 0};
      return v;
    };
    const KvView kv{as_kv(t.k.view), as_kv(t.v.view)};
    for (const QueryChunk& c : chunks) backend.attention(c.q, kv, {0, n}, *c.state);
    ready = next;
  }
}

}  // namespace h3s
