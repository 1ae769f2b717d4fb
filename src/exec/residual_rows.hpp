// ResidualRows: the residual x [S, hidden] bf16 as the streamed path reads and
// updates it, a row chunk at a time. Resident: chunks are views of x on the
// backend. Host-staged (exec/placement.hpp): x lives in host staging memory
// and a chunk is copied into a device slot before its ops and, when they
// update it, copied back out after; so x needs no device memory beyond two
// chunk slots. The ops see the same rows either way, so staging never
// changes a bit.
//
// Overlap. The two slots form a ring: while a chunk's ops run in one slot,
// the next expected chunk (expect()) is already crossing the bus into the
// other, and a chunk's copy back out is never waited for: the slot's next
// writer is either a copy, which the stage queue runs after it (copies run in
// issue order), or ops that wait for it first (a fetch without load), by then
// a chunk's compute later. A fetch larger than a slot, or one the expected
// order did not announce, takes the synchronous path: rows leased from the
// arena, copies waited for.
#pragma once

#include <deque>
#include <optional>

#include "backend/backend.hpp"
#include "backend/stage_queue.hpp"
#include "core/chunk_plan.hpp"

namespace h3s {

class ResidualRows {
 public:
  // One coming fetch: its rows, whether the ops read them (load) and whether
  // they are stored back after (store).
  struct Access {
    RowRange rows;
    bool load = true;
    bool store = false;
  };

  // Rows of x on the backend (or staged in): `view` is what the ops read and
  // write. Move-only: a staged lease holds its slot until it is destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept { *this = std::move(o); }
    Lease& operator=(Lease&& o) noexcept;
    ~Lease();
    Tensor view;

   private:
    friend class ResidualRows;
    ResidualRows* owner_ = nullptr;  // set while it holds a slot
    int slot_ = -1;
    OwnedTensor dynamic_;  // the synchronous path's rows
  };

  // x resident on the backend.
  explicit ResidualRows(const Tensor& x) : x_(x) {}
  // x in host staging memory; two slots of `slot_rows` rows in `device`
  // (allocated here), copies on `queue`.
  ResidualRows(const Tensor& host_x, Arena& device, StageQueue& queue, int64_t slot_rows);

  // Device rows per slot that the streamed block's chunks need: the largest
  // K/V, query and MLP chunk.
  static int64_t slot_rows_for(int64_t seq, int64_t kv_chunk, int64_t q_chunk, int64_t mlp_chunk,
                               int64_t merge_tail_below);
  // Device bytes a staged x holds (its two slots).
  static size_t slot_bytes(int64_t slot_rows, int64_t hidden);

  int64_t rows() const { return x_.rows(); }
  int64_t cols() const { return x_.cols(); }
  bool staged() const { return queue_ != nullptr; }
  int64_t slot_rows() const { return slot_rows_; }
  // The whole x on the backend (resident only).
  const Tensor& resident() const;

  // The fetches that follow, in order: each announced fetch starts the copy
  // of the one after it. A fetch that differs drops the rest.
  void expect(std::vector<Access> accesses);

  // Rows r for the ops: `load` copies their values in (false: the ops only
  // write them, e.g. the patch embed). At most one lease at a time.
  Lease fetch(RowRange r, bool load = true);
  // Makes the ops' writes to the lease the values of x's rows r (staged: the
  // copy back out, queued; later copies and ops that reuse the memory are
  // ordered after it).
  void store(const Lease& lease, RowRange r);

 private:
  struct Slot {
    OwnedTensor rows;
    StageQueue::Ticket last_copy = 0;  // the newest copy into or out of it
    bool leased = false;
  };
  struct Prefetch {
    RowRange rows;
    int slot = 0;
    StageQueue::Ticket ticket = 0;
  };
  void release(int slot) { slots_[slot].leased = false; }
  // Forgets an unused prefetch; its copy stays the slot's last_copy, which
  // whatever writes the slot next is ordered after.
  void drop_prefetch() { prefetch_.reset(); }

  Tensor x_;
  Arena* device_ = nullptr;
  StageQueue* queue_ = nullptr;
  int64_t slot_rows_ = 0;
  Slot slots_[2];
  int next_slot_ = 0;
  std::optional<Prefetch> prefetch_;
  std::deque<Access> expected_;
};

}  // namespace h3s
