// Host staging on the CUDA backend (backend/stage_queue.hpp): PinnedMemory
// (cuda_memory.hpp) and a StageQueue on a copy stream of its own, ordered
// against the backend's compute stream by events, never by host waits.
#include <cuda_runtime.h>

#include <array>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_backend.hpp"
#include "core/error.hpp"

namespace h3s::cuda {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail_cuda(what, e);
}

size_t rounded(size_t bytes) {
  const size_t n = bytes == 0 ? 1 : bytes;
  return (n + PinnedMemory::kGranule - 1) / PinnedMemory::kGranule * PinnedMemory::kGranule;
}

// One copy stream; a ring of (start, done) events per copy for the ticket
// waits and the copy-time total. A ticket older than the ring waits on the
// newest copy instead, which is later in the stream and so implies it.
// Exposed time: each wait is bracketed by two events on the compute stream;
// the second completes once both the compute before it and the awaited copy
// are done, so their distance is how long compute stood still for the copy.
class CudaStageQueue final : public StageQueue {
 public:
  static constexpr size_t kRing = 64;

  explicit CudaStageQueue(CudaBackend& be) : be_(be) {
    check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "stage queue: stream");
    check(cudaEventCreateWithFlags(&order_, cudaEventDisableTiming), "stage queue: event");
    for (Slot& s : ring_) {
      check(cudaEventCreate(&s.start), "stage queue: event");
      check(cudaEventCreate(&s.done), "stage queue: event");
    }
    for (Slot& s : waits_) {
      check(cudaEventCreate(&s.start), "stage queue: event");
      check(cudaEventCreate(&s.done), "stage queue: event");
    }
  }
  ~CudaStageQueue() override {
    (void)cudaStreamSynchronize(copy_);
    for (std::array<Slot, kRing>* r : {&ring_, &waits_})
      for (Slot& s : *r) {
        (void)cudaEventDestroy(s.start);
        (void)cudaEventDestroy(s.done);
      }
    (void)cudaEventDestroy(order_);
    (void)cudaStreamDestroy(copy_);
  }

  Ticket to_device(const Tensor& host_src, const Tensor& dst) override {
    return run(host_src, dst, traffic_.to_device_bytes);
  }
  Ticket to_host(const Tensor& src, const Tensor& host_dst) override {
    return run(src, host_dst, traffic_.to_host_bytes);
  }
  void wait(Ticket t) override {
    H3S_CHECK(t >= 1 && t <= issued_);
    const Ticket use = t + kRing <= issued_ ? issued_ : t;
    Slot& w = waits_[waits_issued_++ % kRing];
    settle(w, traffic_.exposed_seconds);
    check(cudaEventRecord(w.start, be_.stream()), "stage queue: wait start");
    check(cudaStreamWaitEvent(be_.stream(), ring_[use % kRing].done, 0), "stage queue: wait");
    check(cudaEventRecord(w.done, be_.stream()), "stage queue: wait done");
    w.timed = true;
  }
  StageTraffic traffic() override {
    for (Slot& s : ring_) settle(s, traffic_.copy_seconds);
    for (Slot& s : waits_) settle(s, traffic_.exposed_seconds);
    return traffic_;
  }

 private:
  struct Slot {
    cudaEvent_t start = nullptr, done = nullptr;
    bool timed = false;  // recorded, its time not yet added
  };

  // Adds a recorded pair's time to `total` (waiting for it if needed).
  void settle(Slot& s, double& total) {
    if (!s.timed) return;
    float ms = 0;
    check(cudaEventSynchronize(s.done), "stage queue: settle");
    check(cudaEventElapsedTime(&ms, s.start, s.done), "stage queue: elapsed");
    total += double(ms) / 1e3;
    s.timed = false;
  }

  Ticket run(const Tensor& src, const Tensor& dst, uint64_t& bytes) {
    if (src.dtype != dst.dtype || src.rank != 2 || dst.rank != 2 || src.shape != dst.shape ||
        (src.cols() > 1 && (src.stride[1] != 1 || dst.stride[1] != 1)))
      fail(ErrorKind::invalid_argument,
           "stage copy: src and dst must be 2-D views of one dtype and shape with unit column "
           "stride");
    const size_t es = dtype_size(src.dtype), width = size_t(src.cols()) * es;
    const Ticket t = ++issued_;
    Slot& s = ring_[t % kRing];
    settle(s, traffic_.copy_seconds);
    // After the compute work so far: the writers of src, the readers of dst.
    check(cudaEventRecord(order_, be_.stream()), "stage queue: order");
    check(cudaStreamWaitEvent(copy_, order_, 0), "stage queue: order");
    check(cudaEventRecord(s.start, copy_), "stage queue: start");
    if (src.rows() > 0 && width > 0)
      check(cudaMemcpy2DAsync(dst.data, size_t(dst.row_stride()) * es, src.data,
                              size_t(src.row_stride()) * es, width, size_t(src.rows()),
                              cudaMemcpyDefault, copy_),
            "stage queue: copy");
    check(cudaEventRecord(s.done, copy_), "stage queue: done");
    s.timed = true;
    bytes += uint64_t(width) * uint64_t(src.rows());
    traffic_.copies = t;
    return t;
  }

  CudaBackend& be_;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t order_ = nullptr;
  std::array<Slot, kRing> ring_{};
  std::array<Slot, kRing> waits_{};  // (before, after) each wait, on the compute stream
  Ticket issued_ = 0;
  uint64_t waits_issued_ = 0;
  StageTraffic traffic_;
};

}  // namespace

PinnedMemory::~PinnedMemory() {
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) (void)cudaFreeHost(p);
}

void* PinnedMemory::allocate(size_t bytes) {
  const size_t n = rounded(bytes);
  {
    std::lock_guard lock(mutex_);
    auto it = free_.find(n);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      return p;
    }
  }
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail(ErrorKind::out_of_memory,
         "cuda: cannot pin {} of host memory for staging: {} ({}); lower the host budget's "
         "need (a smaller sequence) or free host memory",
         format_bytes(bytes), cudaGetErrorName(e), cudaGetErrorString(e));
  }
  return p;
}

void PinnedMemory::deallocate(void* p, size_t bytes) {
  if (!p) return;
  std::lock_guard lock(mutex_);
  free_[rounded(bytes)].push_back(p);
}

size_t PinnedMemory::cached_bytes() const {
  std::lock_guard lock(mutex_);
  size_t n = 0;
  for (const auto& [size, blocks] : free_) n += size * blocks.size();
  return n;
}

MemoryResource& CudaBackend::host_staging_memory() {
  return *pinned_;
}

size_t CudaBackend::free_device_memory() const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return free_b;
}

std::unique_ptr<StageQueue> CudaBackend::make_stage_queue() {
  return std::make_unique<CudaStageQueue>(*this);
}

}  // namespace h3s::cuda
