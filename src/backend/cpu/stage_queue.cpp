// The CPU backend's staging (backend/stage_queue.hpp): host staging memory is
// the heap and a copy is a synchronous strided memcpy, so the same placement
// code, budgets and ledger run in CI without a GPU. All copy time is exposed.
#include <chrono>

#include "backend/cpu/cpu_backend.hpp"

namespace h3s::cpu {

namespace {

class CpuStageQueue final : public StageQueue {
 public:
  explicit CpuStageQueue(CpuBackend& be) : be_(be) {}
  Ticket to_device(const Tensor& host_src, const Tensor& dst) override {
    return run(host_src, dst, traffic_.to_device_bytes);
  }
  Ticket to_host(const Tensor& src, const Tensor& host_dst) override {
    return run(src, host_dst, traffic_.to_host_bytes);
  }
  void wait(Ticket t) override { H3S_CHECK(t <= traffic_.copies); }
  StageTraffic traffic() override { return traffic_; }

 private:
  Ticket run(const Tensor& src, const Tensor& dst, uint64_t& bytes) {
    const auto t0 = std::chrono::steady_clock::now();
    be_.copy(src, dst);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bytes += uint64_t(src.numel()) * dtype_size(src.dtype);
    traffic_.copy_seconds += s;
    traffic_.exposed_seconds += s;
    return ++traffic_.copies;
  }
  CpuBackend& be_;
  StageTraffic traffic_;
};

}  // namespace

MemoryResource& CpuBackend::host_staging_memory() {
  return staging_memory_;
}

std::unique_ptr<StageQueue> CpuBackend::make_stage_queue() {
  return std::make_unique<CpuStageQueue>(*this);
}

}  // namespace h3s::cpu
