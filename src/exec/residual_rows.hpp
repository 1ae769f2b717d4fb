// ResidualRows: the residual x [S, hidden] bf16 as the streamed path reads and
// updates it, a row chunk at a time. Resident: chunks are views of x on the
// backend. Host-staged (exec/placement.hpp): x lives in host staging memory,
// a chunk is copied in before its ops and, when they update it, copied back
// out after; so x needs no device memory beyond the chunks in use. The ops
// see the same rows either way, so staging never changes a bit.
#pragma once

#include "backend/backend.hpp"

namespace h3s {

class ResidualRows {
 public:
  // Rows of x on the backend (or staged in): `view` is what the ops read and
  // write; `staged` owns the device copy when x is host-staged.
  struct Lease {
    Tensor view;
    OwnedTensor staged;
  };

  // x resident on the backend.
  explicit ResidualRows(const Tensor& x) : x_(x) {}
  // x in host staging memory; chunks in `device`, copies on `queue`.
  ResidualRows(const Tensor& host_x, Arena& device, StageQueue& queue)
      : x_(host_x), device_(&device), queue_(&queue) {}

  int64_t rows() const { return x_.rows(); }
  int64_t cols() const { return x_.cols(); }
  bool staged() const { return queue_ != nullptr; }
  // The whole x on the backend (resident only).
  const Tensor& resident() const;

  // Rows r for the ops: `load` copies their values in (false: the ops only
  // write them, e.g. the patch embed).
  Lease fetch(RowRange r, bool load = true);
  // Makes the ops' writes to the lease the values of x's rows r (staged: the
  // copy back out, waited for before the lease's memory can be reused).
  void store(const Lease& lease, RowRange r);

 private:
  Tensor x_;
  Arena* device_ = nullptr;
  StageQueue* queue_ = nullptr;
};

}  // namespace h3s
