// The residual x, resident or host-staged (see residual_rows.hpp).
#include "exec/residual_rows.hpp"

#include <algorithm>

namespace h3s {

namespace {

bool overlaps(RowRange a, RowRange b) {
  return a.begin < b.end && b.begin < a.end;
}

}  // namespace

ResidualRows::Lease& ResidualRows::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    if (owner_) owner_->release(slot_);
    view = o.view;
    owner_ = o.owner_;
    slot_ = o.slot_;
    dynamic_ = std::move(o.dynamic_);
    o.owner_ = nullptr;
    o.slot_ = -1;
    o.view = Tensor{};
  }
  return *this;
}

ResidualRows::Lease::~Lease() {
  if (owner_) owner_->release(slot_);
}

ResidualRows::ResidualRows(const Tensor& host_x, Arena& device, StageQueue& queue,
                           int64_t slot_rows)
    : x_(host_x), device_(&device), queue_(&queue), slot_rows_(std::max<int64_t>(slot_rows, 1)) {
  for (Slot& s : slots_)
    s.rows = device.tensor(DType::bf16, {slot_rows_, x_.cols()}, "residual rows slot (staged)");
}

int64_t ResidualRows::slot_rows_for(int64_t seq, int64_t kv_chunk, int64_t q_chunk,
                                    int64_t mlp_chunk, int64_t merge_tail_below) {
  // A fixed chunk of any span up to seq rows (the patch embeds cut each
  // segment with kv_chunk) is at most chunk + merge_tail_below - 1 rows.
  const auto fixed = [&](int64_t chunk) {
    return chunk <= 0 ? seq : std::min(seq, chunk + std::max<int64_t>(merge_tail_below - 1, 0));
  };
  return std::max(
      {fixed(kv_chunk), ChunkPlan::balanced(seq, q_chunk).largest(), fixed(mlp_chunk), int64_t(1)});
}

size_t ResidualRows::slot_bytes(int64_t slot_rows, int64_t hidden) {
  return size_t(2) * size_t(std::max<int64_t>(slot_rows, 1)) * size_t(hidden) * 2;
}

const Tensor& ResidualRows::resident() const {
  if (staged())
    fail(ErrorKind::internal, "the residual x is host-staged: it has no whole device view");
  return x_;
}

void ResidualRows::expect(std::vector<Access> accesses) {
  if (!staged()) return;
  expected_.assign(accesses.begin(), accesses.end());
}

ResidualRows::Lease ResidualRows::fetch(RowRange r, bool load) {
  Lease l;
  if (!staged()) {
    l.view = x_.rows_view(r.begin, r.end);
    return l;
  }
  H3S_CHECK(!slots_[0].leased && !slots_[1].leased);  // one lease at a time
  std::optional<Access> now;
  if (!expected_.empty() && expected_.front().rows == r && expected_.front().load == load) {
    now = expected_.front();
    expected_.pop_front();
  } else {
    expected_.clear();
  }
  const Tensor host = x_.rows_view(r.begin, r.end);
  int s = -1;
  if (prefetch_ && prefetch_->rows == r && load) {
    s = prefetch_->slot;
    queue_->wait(prefetch_->ticket);
    prefetch_.reset();
  } else {
    drop_prefetch();
    if (r.size() > slot_rows_) {  // the synchronous path
      l.dynamic_ = device_->tensor(DType::bf16, {r.size(), x_.cols()}, "residual rows (staged)");
      l.view = l.dynamic_.view;
      if (load) queue_->wait(queue_->to_device(host, l.view));
      return l;
    }
    s = next_slot_;
    Slot& slot = slots_[s];
    const Tensor dst = slot.rows.view.rows_view(0, r.size());
    if (load) {
      slot.last_copy = queue_->to_device(host, dst);
      queue_->wait(slot.last_copy);
    } else if (slot.last_copy != 0) {
      queue_->wait(slot.last_copy);  // the ops overwrite it: after its last copy
    }
  }
  next_slot_ = 1 - s;
  slots_[s].leased = true;
  l.owner_ = this;
  l.slot_ = s;
  l.view = slots_[s].rows.view.rows_view(0, r.size());
  // Start the next announced fetch into the other slot, unless this lease's
  // store would change rows it reads.
  if (now && !expected_.empty()) {
    const Access& n = expected_.front();
    if (n.load && n.rows.size() <= slot_rows_ && !(now->store && overlaps(n.rows, r))) {
      Slot& o = slots_[1 - s];
      o.last_copy = queue_->to_device(x_.rows_view(n.rows.begin, n.rows.end),
                                      o.rows.view.rows_view(0, n.rows.size()));
      prefetch_ = Prefetch{n.rows, 1 - s, o.last_copy};
    }
  }
  return l;
}

void ResidualRows::store(const Lease& lease, RowRange r) {
  if (!staged()) return;  // the ops wrote x itself
  const Tensor host = x_.rows_view(r.begin, r.end);
  if (lease.slot_ < 0) {  // arena rows, freed after this: wait for the copy
    queue_->wait(queue_->to_host(lease.view, host));
    return;
  }
  slots_[lease.slot_].last_copy = queue_->to_host(lease.view, host);
  if (prefetch_ && overlaps(prefetch_->rows, r)) drop_prefetch();  // it read stale rows
}

}  // namespace h3s
