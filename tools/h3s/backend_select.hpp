// --backend cpu|cuda: the backend and the memory its arena draws from.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.hpp"

namespace h3s::cli {

struct BackendSetup {
  std::unique_ptr<MemoryResource> memory;
  std::unique_ptr<Arena> arena;
  std::unique_ptr<Backend> backend;
};

// Throws Error(invalid_argument) for "cuda" when this build has no CUDA
// backend, naming the fix.
BackendSetup make_backend(const std::string& name, size_t budget_bytes, int threads);
bool cuda_available();

}  // namespace h3s::cli
