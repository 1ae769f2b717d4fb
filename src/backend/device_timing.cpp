// Backend::device_seconds for backends that run where the host clock is
// (the CPU backend): drain, run, drain, read the clock.
#include <chrono>

#include "backend/backend.hpp"

namespace h3s {

double Backend::device_seconds(const std::function<void()>& enqueue) {
  synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  enqueue();
  synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace h3s
