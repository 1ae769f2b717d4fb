// The residual x, resident or host-staged (see residual_rows.hpp).
#include "exec/residual_rows.hpp"

namespace h3s {

const Tensor& ResidualRows::resident() const {
  if (staged())
    fail(ErrorKind::internal, "the residual x is host-staged: it has no whole device view");
  return x_;
}

ResidualRows::Lease ResidualRows::fetch(RowRange r, bool load) {
  Lease l;
  if (!staged()) {
    l.view = x_.rows_view(r.begin, r.end);
    return l;
  }
  l.staged = device_->tensor(DType::bf16, {r.size(), x_.cols()}, "residual rows (staged)");
  l.view = l.staged.view;
  if (load) queue_->wait(queue_->to_device(x_.rows_view(r.begin, r.end), l.view));
  return l;
}

void ResidualRows::store(const Lease& lease, RowRange r) {
  if (!staged()) return;  // the ops wrote x itself
  queue_->wait(queue_->to_host(lease.view, x_.rows_view(r.begin, r.end)));
}

}  // namespace h3s
