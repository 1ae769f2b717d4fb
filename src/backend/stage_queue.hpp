// StageQueue: copies between host staging memory and backend memory on a queue
// of their own, so the placement planner (exec/placement.hpp) can keep O(N)
// buffers (the K/V store) in host memory and overlap their traffic with
// compute.
//
// Ordering is explicit and one-sided. A copy starts after every op issued to
// the backend before it (the kernels that wrote its source, or last read its
// destination). Ops issued after wait(t) run after copy t. Copies run in
// issue order, so waiting for a ticket covers every earlier copy too.
//
// Host staging memory comes from Backend::host_staging_memory(): pinned on
// CUDA (DMA at copy-engine speed, no bounce), the heap on the CPU backend,
// where "host" and "device" are the same RAM but are budgeted as two pools so
// every placement decision runs in CI without a GPU.
#pragma once

#include <cstdint>

#include "core/tensor.hpp"

namespace h3s {

// Bytes and time a StageQueue moved (the ledger's transfer columns).
struct StageTraffic {
  uint64_t to_device_bytes = 0, to_host_bytes = 0;
  uint64_t copies = 0;
  // Time the copies ran (CUDA: copy-stream event time; CPU: the memcpy time).
  double copy_seconds = 0;
  // Time the compute side stood still waiting for copies (CUDA: events on
  // the compute stream around each wait; CPU: the copies are synchronous, so
  // all of copy_seconds). copy_seconds - exposed_seconds was hidden.
  double exposed_seconds = 0;
};

class StageQueue {
 public:
  using Ticket = uint64_t;
  virtual ~StageQueue() = default;
  // Queue a copy of the 2-D view `src` into `dst` (same dtype and shape, any
  // row strides): host staging memory -> backend memory, or back.
  virtual Ticket to_device(const Tensor& host_src, const Tensor& dst) = 0;
  virtual Ticket to_host(const Tensor& src, const Tensor& host_dst) = 0;
  // Backend ops issued after this run after copy `t` (and every earlier one).
  virtual void wait(Ticket t) = 0;
  // Totals so far (CUDA: synchronises the copy stream to read its events).
  virtual StageTraffic traffic() = 0;
};

}  // namespace h3s
