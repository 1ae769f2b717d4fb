// Backend selection for the CLI.
#include "backend_select.hpp"

#include "core/error.hpp"
#ifdef H3S_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_memory.hpp"
#endif

namespace h3s::cli {

bool cuda_available() {
#ifdef H3S_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

BackendSetup make_backend(const std::string& name, size_t budget_bytes, int threads) {
  BackendSetup s;
  if (name == "cpu") {
    s.memory = std::make_unique<HostMemory>();
    s.arena = std::make_unique<Arena>(*s.memory, budget_bytes);
    s.backend = make_cpu_backend(threads);
    return s;
  }
  if (name == "cuda") {
#ifdef H3S_HAVE_CUDA
    // Plain cudaMalloc/cudaFree arena: the configuration measured on the H200.
    // A stream-ordered arena (CudaMemory(stream)) should remove cudaFree's
    // device-wide syncs between chunks, but its one device run (2026-11-30)
    // printed nothing within 90 s at 217k tokens: unverified, so not the default.
    s.memory = std::make_unique<cuda::CudaMemory>();
    s.arena = std::make_unique<Arena>(*s.memory, budget_bytes);
    s.backend = make_cuda_backend(*s.arena);
    return s;
#else
    fail(ErrorKind::invalid_argument,
         "--backend cuda: this h3s was built without the CUDA backend (configure with nvcc on "
         "PATH, or -DH3S_CUDA=ON)");
#endif
  }
  fail(ErrorKind::invalid_argument, "--backend '{}' is not valid: use cpu or cuda", name);
}

}  // namespace h3s::cli
