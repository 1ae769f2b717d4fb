// Host staging on the CUDA backend (backend/stage_queue.hpp): PinnedMemory
// (cuda_memory.hpp) and a StageQueue on copy streams of its own, ordered
// against the backend's compute stream and each other by events, never by
// host waits (but for the ring's bookkeeping).
#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

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

// Two copy streams, one per direction, so copies to the device and to the
// host share the bus at once (PCIe is full duplex): a host-staged residual's
// stores no longer queue ahead of the next K/V tile, nor phase 1's K/V
// stores ahead of the residual's loads. Copies of one direction run in issue
// order; a copy that touches bytes an earlier copy of the other direction
// reads or writes (a read after a write, or a write after either) waits for
// it on the device.
//
// A ring of kRing copies holds each one's (start, done) events, direction
// and byte ranges. Issuing copy t first settles copy t - kRing (a host wait
// for it), so every copy older than the ring is complete: the hazard scan
// and the ticket waits only look inside the ring.
//
// Exposed time: each wait is bracketed by two events on the compute stream;
// the second completes once both the compute before it and the awaited copy
// are done, so their distance is how long compute stood still for the copy.
//
// H3S_STAGE_TRACE=FILE appends the queue's timeline to FILE when it is
// destroyed: one JSON line per copy (direction, bytes, start and end in ms
// from the queue's creation) and per wait (when compute reached it and when
// it went on), for placement profiles (nothing is recorded without it).
class CudaStageQueue final : public StageQueue {
 public:
  static constexpr size_t kRing = 64;

  explicit CudaStageQueue(CudaBackend& be) : be_(be) {
    if (const char* path = std::getenv("H3S_STAGE_TRACE"); path && *path) {
      trace_path_ = path;
      check(cudaEventCreate(&base_), "stage queue: event");
      check(cudaEventRecord(base_, be_.stream()), "stage queue: trace base");
    }
    for (cudaStream_t& s : streams_)
      check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stage queue: stream");
    check(cudaEventCreateWithFlags(&order_, cudaEventDisableTiming), "stage queue: event");
    for (Copy& c : ring_) {
      check(cudaEventCreate(&c.start), "stage queue: event");
      check(cudaEventCreate(&c.done), "stage queue: event");
    }
    for (Wait& w : waits_) {
      check(cudaEventCreate(&w.start), "stage queue: event");
      check(cudaEventCreate(&w.done), "stage queue: event");
    }
  }
  ~CudaStageQueue() override {
    for (cudaStream_t s : streams_) (void)cudaStreamSynchronize(s);
    if (base_) {
      try {
        (void)traffic();  // settles (and records) every copy and wait
      } catch (...) {
      }
      if (FILE* f = std::fopen(trace_path_.c_str(), "a")) {
        std::fprintf(f, "{\"kind\": \"queue\", \"records\": %zu}\n", trace_.size());
        for (const std::string& line : trace_) std::fprintf(f, "%s\n", line.c_str());
        std::fclose(f);
      }
      (void)cudaEventDestroy(base_);
    }
    for (Copy& c : ring_) {
      (void)cudaEventDestroy(c.start);
      (void)cudaEventDestroy(c.done);
    }
    for (Wait& w : waits_) {
      (void)cudaEventDestroy(w.start);
      (void)cudaEventDestroy(w.done);
    }
    (void)cudaEventDestroy(order_);
    for (cudaStream_t s : streams_) (void)cudaStreamDestroy(s);
  }

  Ticket to_device(const Tensor& host_src, const Tensor& dst) override {
    return run(host_src, dst, kToDevice, traffic_.to_device_bytes);
  }
  Ticket to_host(const Tensor& src, const Tensor& host_dst) override {
    return run(src, host_dst, kToHost, traffic_.to_host_bytes);
  }
  void wait(Ticket t) override {
    H3S_CHECK(t >= 1 && t <= issued_);
    Wait& w = waits_[waits_issued_++ % kRing];
    settle(w.start, w.done, w.timed, traffic_.exposed_seconds, "wait");
    check(cudaEventRecord(w.start, be_.stream()), "stage queue: wait start");
    // Copy t and, for "every earlier copy", the other direction's last one
    // before it (its own direction's earlier copies ran before it).
    const Copy* c = in_ring(t);
    for (const Copy* d : {c, c ? in_ring(c->other_before) : nullptr})
      if (d) check(cudaStreamWaitEvent(be_.stream(), d->done, 0), "stage queue: wait");
    check(cudaEventRecord(w.done, be_.stream()), "stage queue: wait done");
    w.timed = true;
  }
  StageTraffic traffic() override {
    for (Copy& c : ring_) settle_copy(c);
    for (Wait& w : waits_) settle(w.start, w.done, w.timed, traffic_.exposed_seconds, "wait");
    return traffic_;
  }

 private:
  enum Direction : int { kToDevice = 0, kToHost = 1 };
  struct Bytes {  // [lo, hi) of one copy side; empty when lo == hi
    uintptr_t lo = 0, hi = 0;
    bool overlaps(const Bytes& o) const { return lo < o.hi && o.lo < hi; }
  };
  struct Copy {
    cudaEvent_t start = nullptr, done = nullptr;
    bool timed = false;  // recorded, its time not yet added
    Ticket ticket = 0;
    Direction dir = kToDevice;
    Bytes src, dst;
    Ticket other_before = 0;     // the other direction's last copy when this was issued
    Ticket same_dir_before = 0;  // this direction's copy before it
    uint64_t bytes = 0;          // for the trace
    int64_t rows = 0;
    double host_ms = 0;  // the host's time in the copy call (it should not block)
  };
  struct Wait {
    cudaEvent_t start = nullptr, done = nullptr;
    bool timed = false;
  };

  static Bytes bytes_of(const Tensor& t, size_t width) {
    if (t.rows() == 0 || width == 0) return {};
    const auto lo = reinterpret_cast<uintptr_t>(t.data);
    return {lo, lo + size_t(t.rows() - 1) * size_t(t.row_stride()) * dtype_size(t.dtype) + width};
  }
  // Copy t while its ring slot still holds it (else it is complete, or 0).
  const Copy* in_ring(Ticket t) const {
    if (t == 0) return nullptr;
    const Copy& c = ring_[t % kRing];
    return c.ticket == t ? &c : nullptr;
  }

  // Adds a recorded pair's time to `total` (waiting for it if needed), and
  // to the trace when there is one (`extra`: the record's other fields).
  void settle(cudaEvent_t start, cudaEvent_t done, bool& timed, double& total, const char* kind,
              const std::string& extra = {}) {
    if (!timed) return;
    float ms = 0;
    check(cudaEventSynchronize(done), "stage queue: settle");
    check(cudaEventElapsedTime(&ms, start, done), "stage queue: elapsed");
    total += double(ms) / 1e3;
    timed = false;
    if (!base_) return;
    float t0 = 0, t1 = 0;
    check(cudaEventElapsedTime(&t0, base_, start), "stage queue: trace");
    check(cudaEventElapsedTime(&t1, base_, done), "stage queue: trace");
    char line[256];
    std::snprintf(line, sizeof line, R"({"kind": "%s", "t0_ms": %.4f, "t1_ms": %.4f%s})", kind,
                  double(t0), double(t1), extra.c_str());
    trace_.emplace_back(line);
  }
  void settle_copy(Copy& c) {
    std::string extra;
    if (base_ && c.timed)
      extra = std::string(R"(, "dir": ")") + (c.dir == kToDevice ? "in" : "out") +
              R"(", "bytes": )" + std::to_string(c.bytes) + R"(, "rows": )" +
              std::to_string(c.rows) + R"(, "host_ms": )" + std::to_string(c.host_ms);
    settle(c.start, c.done, c.timed, traffic_.copy_seconds, "copy", extra);
  }

  Ticket run(const Tensor& src, const Tensor& dst, Direction dir, uint64_t& bytes) {
    if (src.dtype != dst.dtype || src.rank != 2 || dst.rank != 2 || src.shape != dst.shape ||
        (src.cols() > 1 && (src.stride[1] != 1 || dst.stride[1] != 1)))
      fail(ErrorKind::invalid_argument,
           "stage copy: src and dst must be 2-D views of one dtype and shape with unit column "
           "stride");
    const size_t es = dtype_size(src.dtype), width = size_t(src.cols()) * es;
    const Ticket t = ++issued_;
    Copy& c = ring_[t % kRing];
    settle_copy(c);  // copy t - kRing is complete
    c.ticket = t;
    c.dir = dir;
    c.bytes = uint64_t(width) * uint64_t(src.rows());
    c.rows = src.rows();
    c.src = bytes_of(src, width);
    c.dst = bytes_of(dst, width);
    c.other_before = last_[1 - dir];
    cudaStream_t stream = streams_[dir];
    // After the compute work so far: the writers of src, the readers of dst.
    check(cudaEventRecord(order_, be_.stream()), "stage queue: order");
    check(cudaStreamWaitEvent(stream, order_, 0), "stage queue: order");
    // After the latest copy of the other direction that writes what this one
    // touches, or reads what it writes.
    for (Ticket u = last_[1 - dir]; u != 0;) {
      const Copy* o = in_ring(u);
      if (!o) break;  // older copies are complete
      if (o->dst.overlaps(c.src) || o->dst.overlaps(c.dst) || o->src.overlaps(c.dst)) {
        check(cudaStreamWaitEvent(stream, o->done, 0), "stage queue: hazard");
        break;  // its stream ran every earlier copy of that direction before it
      }
      u = o->same_dir_before;
    }
    check(cudaEventRecord(c.start, stream), "stage queue: start");
    const auto host_t0 = std::chrono::steady_clock::now();
    const size_t src_pitch = size_t(src.row_stride()) * es,
                 dst_pitch = size_t(dst.row_stride()) * es;
    if (src.rows() > 0 && width > 0) {
      // Rows that are one contiguous range on both sides go as a plain copy.
      if (src.rows() == 1 || (src_pitch == width && dst_pitch == width))
        check(cudaMemcpyAsync(dst.data, src.data, width * size_t(src.rows()), cudaMemcpyDefault,
                              stream),
              "stage queue: copy");
      else
        check(cudaMemcpy2DAsync(dst.data, dst_pitch, src.data, src_pitch, width, size_t(src.rows()),
                                cudaMemcpyDefault, stream),
              "stage queue: copy");
    }
    c.host_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - host_t0)
            .count();
    check(cudaEventRecord(c.done, stream), "stage queue: done");
    c.timed = true;
    c.same_dir_before = last_[dir];
    last_[dir] = t;
    bytes += uint64_t(width) * uint64_t(src.rows());
    traffic_.copies = t;
    return t;
  }

  CudaBackend& be_;
  cudaStream_t streams_[2] = {nullptr, nullptr};  // by Direction
  cudaEvent_t order_ = nullptr;
  std::array<Copy, kRing> ring_{};
  std::array<Wait, kRing> waits_{};  // (before, after) each wait, on the compute stream
  Ticket issued_ = 0;
  Ticket last_[2] = {0, 0};  // the last copy issued in each direction
  uint64_t waits_issued_ = 0;
  StageTraffic traffic_;
  cudaEvent_t base_ = nullptr;  // the trace's time 0 (H3S_STAGE_TRACE only)
  std::string trace_path_;
  std::vector<std::string> trace_;
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

namespace {
// The driver's free and total device bytes ({0, 0} when it cannot say).
std::pair<size_t, size_t> device_memory_info() {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    (void)cudaGetLastError();
    return {0, 0};
  }
  return {free_b, total_b};
}
}  // namespace

size_t CudaBackend::free_device_memory() const {
  return device_memory_info().first;
}

size_t CudaBackend::device_memory_in_use() const {
  const auto [free_b, total_b] = device_memory_info();
  return total_b - free_b;
}

void CudaBackend::trim_device_cache() {
  int device = 0;
  cudaMemPool_t pool = nullptr;
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaGetDevice(&device);
  if (e == cudaSuccess) e = cudaDeviceGetDefaultMemPool(&pool, device);
  if (e == cudaSuccess) e = cudaMemPoolTrimTo(pool, 0);
  if (e != cudaSuccess) fail_cuda("cuda memory: trimming the memory pool", e);
}

std::unique_ptr<StageQueue> CudaBackend::make_stage_queue() {
  return std::make_unique<CudaStageQueue>(*this);
}

}  // namespace h3s::cuda
