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

void KvStagedStore::attend(Backend& backend, std::span<const QueryChunk> chunks) {
  if (source_) {
    queue_.wait(source_read_);
    source_.reset();
  }
  const int64_t inner = heads_ * head_dim_, rows = std::min(kv_block_, seq_);
  for (Tile& t : tiles_)
    if (!t.k) {
      t.k = device_.tensor(DType::bf16, {rows, inner}, "K/V staging tile (K)");
      t.v = device_.tensor(DType::bf16, {rows, inner}, "K/V staging tile (V)");
    }
  const int64_t blocks = (seq_ + kv_block_ - 1) / kv_block_;
  // Queue block j's copy into tile j % 2. It starts after the work issued so
  // far, which includes the last reads of that tile (block j - 2).
  auto fetch = [&](int64_t j) {
    const int64_t b = j * kv_block_, e = std::min(seq_, b + kv_block_);
    const Tile& t = tiles_[j % 2];
    queue_.to_device(k_.view.rows_view(b, e), t.k.view.rows_view(0, e - b));
    return queue_.to_device(v_.view.rows_view(b, e), t.v.view.rows_view(0, e - b));
  };
  StageQueue::Ticket ready = fetch(0);
  for (int64_t j = 0; j < blocks; ++j) {
    const StageQueue::Ticket next = j + 1 < blocks ? fetch(j + 1) : 0;
    queue_.wait(ready);
    const int64_t n = std::min(seq_, (j + 1) * kv_block_) - j * kv_block_;
    const Tile& t = tiles_[j % 2];
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
