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
  kv_ = host.tensor(DType::bf16, {seq, 2 * heads * head_dim}, "K,V store (host-staged)");
}

size_t KvStagedStore::tile_bytes(int64_t kv_block, int64_t heads, int64_t head_dim) {
  return size_t(2 /*slots*/ * 2 /*K, V*/) * size_t(kv_block * heads * head_dim) * 2;
}

size_t KvStagedStore::host_bytes(int64_t seq, int64_t heads, int64_t head_dim) {
  return size_t(2) * size_t(seq * heads * head_dim) * 2;
}

void KvStagedStore::write(Backend&, RowRange rows, const Tensor& k, const Tensor& v) {
  const int64_t inner = heads_ * head_dim_;
  const Tensor host = kv_.view.rows_view(rows.begin, rows.end);
  // K and V side by side in one buffer (phase 1's projection output): one copy.
  const bool adjacent = k.rank == 2 && v.rank == 2 && k.cols() == inner && v.cols() == inner &&
                        k.row_stride() == v.row_stride() &&
                        v.data == static_cast<char*>(k.data) + inner * int64_t(dtype_size(k.dtype));
  if (adjacent) {
    Tensor both = k;
    both.shape[1] = 2 * inner;
    written_ = queue_.to_host(both, host);
    return;
  }
  queue_.to_host(k, host.cols_view(0, inner));
  written_ = queue_.to_host(v, host.cols_view(inner, 2 * inner));
}

void KvStagedStore::keep_source(OwnedTensor&& buffer) {
  // The previous chunk's buffer returns to the arena once its copies have run
  // (ops issued from here on wait for them, not the copies of this chunk).
  if (source_) queue_.wait(source_read_);
  source_ = std::move(buffer);
  source_read_ = written_;
}

void KvStagedStore::release_source() {
  if (!source_) return;
  queue_.wait(source_read_);
  source_.reset();
}

void KvStagedStore::allocate_tiles() {
  const int64_t inner = heads_ * head_dim_, rows = std::min(kv_block_, seq_);
  for (OwnedTensor& t : tiles_)
    if (!t) t = device_.tensor(DType::bf16, {rows, 2 * inner}, "K/V staging tile");
}

// The copy starts after the work issued so far, which includes the last
// reads of that tile (two blocks earlier).
StageQueue::Ticket KvStagedStore::fetch(int64_t j, int slot) {
  const int64_t b = j * kv_block_, e = std::min(seq_, b + kv_block_);
  return queue_.to_device(kv_.view.rows_view(b, e), tiles_[slot].view.rows_view(0, e - b));
}

void KvStagedStore::expect_passes(int64_t passes) {
  passes_left_ = passes;
  if (passes <= 0 || first_ready_ != 0) return;
  release_source();
  allocate_tiles();
  first_ready_ = fetch(0, next_slot_);
}

void KvStagedStore::attend(Backend& backend, std::span<const QueryChunk> chunks) {
  release_source();
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
    // [n, heads, head_dim] over the seq-major tile; the tile's key 0 is key
    // j * kv_block, a tile boundary, so the kernel's 128-key tiles coincide.
    auto as_kv = [&](int64_t col) {
      Tensor v = tiles_[slot].view.rows_view(0, n).cols_view(col, col + inner);
      v.rank = 3;
      v.shape = {n, heads_, head_dim_, 0};
      v.stride = {2 * inner, head_dim_, 1, 0};
      return v;
    };
    const KvView kv{as_kv(0), as_kv(inner)};
    for (const QueryChunk& c : chunks) backend.attention(c.q, kv, {0, n}, *c.state);
    ready = next;
  }
}

}  // namespace h3s
