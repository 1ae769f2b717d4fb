// Communicator: how the ranks of a sequence-parallel block move bytes between
// their buffers, with NCCL's semantics (docs/DESIGN.md "Multi-GPU": NCCL is
// the transport). The executor (dist/sp_block.hpp) is written against this
// interface only; LocalCommunicator (dist/local_communicator.hpp) runs N
// ranks as N threads for the CPU tests, an NCCL implementation runs one rank
// per GPU.
//
// Buffers are plain bytes of the engine's tensors and may live in device
// memory: no implementation dereferences them on the host except the local
// one, whose ranks are CPU backends.
//
// Completion: a call returns when its received bytes are in place and its
// sent buffers may be reused, for every backend op issued after it. The local
// communicator blocks until then. The NCCL implementation enqueues on the
// backend's stream and returns at once; stream order gives the same
// guarantee, which is all the executor relies on (it touches these buffers
// through backend ops only).
#pragma once

#include <cstddef>
#include <span>

#include "core/tensor.hpp"

namespace h3s {

// Bytes one rank sends: `size` bytes from `data`.
struct SendBytes {
  const void* data = nullptr;
  size_t size = 0;
};

// Bytes one rank receives: exactly `size` bytes into `data` (the sender must
// send that many: a mismatch is an error, never a truncation).
struct RecvBytes {
  void* data = nullptr;
  size_t size = 0;
};

// One transfer of a point-to-point group: to or from rank `peer` (the
// calling rank itself is a valid peer).
struct PeerSend {
  int peer = -1;
  SendBytes bytes;
};
struct PeerRecv {
  int peer = -1;
  RecvBytes bytes;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Collective. recv = every rank's `send` in rank order; every rank sends
  // the same number of bytes and recv.size == size() * send.size.
  // NCCL: ncclAllGather(send, recv, send.size, ncclUint8, comm, stream).
  virtual void all_gather(SendBytes send, RecvBytes recv) = 0;

  // Collective, counts per peer (all-to-all-v; an all-gather-v passes the
  // same `send` for every peer). send[p] goes to rank p, recv[p] comes from
  // rank p; both spans hold size() entries and recv[p].size must equal rank
  // p's send[rank()].size. Zero sizes are no transfer.
  // NCCL: ncclGroupStart(); for each p with bytes: ncclSend(send[p], p),
  // ncclRecv(recv[p], p); ncclGroupEnd().
  virtual void all_to_all(std::span<const SendBytes> send, std::span<const RecvBytes> recv) = 0;

  // Point to point, not a collective: a group of sends and receives with any
  // peers; only the ranks named take part. Returns when all of them have
  // completed, so ranks that send to each other in one group cannot
  // deadlock. Transfers between one pair of ranks are matched in the order
  // each side issues them (across groups too).
  // NCCL: ncclGroupStart(); ncclSend / ncclRecv for each; ncclGroupEnd().
  virtual void exchange(std::span<const PeerSend> sends, std::span<const PeerRecv> recvs) = 0;

  // A group of one transfer. NCCL: ncclSend / ncclRecv.
  void send(SendBytes bytes, int peer) {
    const PeerSend s{.peer = peer, .bytes = bytes};
    exchange({&s, 1}, {});
  }
  void recv(RecvBytes bytes, int peer) {
    const PeerRecv r{.peer = peer, .bytes = bytes};
    exchange({}, {&r, 1});
  }

  // Collective: returns once every rank has called it. NCCL has no barrier:
  // an ncclAllReduce of one int on the stream, then a stream synchronise.
  virtual void barrier() = 0;
};

// The bytes of a contiguous tensor (rows_view of a contiguous tensor is one).
inline SendBytes send_bytes(const Tensor& t) {
  H3S_CHECK(t.is_contiguous());
  return {.data = t.data, .size = size_t(t.numel()) * dtype_size(t.dtype)};
}
inline RecvBytes recv_bytes(const Tensor& t) {
  H3S_CHECK(t.is_contiguous());
  return {.data = t.data, .size = size_t(t.numel()) * dtype_size(t.dtype)};
}

}  // namespace h3s
