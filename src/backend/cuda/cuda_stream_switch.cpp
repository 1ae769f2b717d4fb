// CudaBackend::set_stream: moving the backend onto the caller's stream.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.hpp"

namespace h3s::cuda {

// Defined in cuda_memory.cpp.
[[noreturn]] void fail_cuda(const char* what, cudaError_t err);

void CudaBackend::set_stream(cudaStream_t stream) {
  if (stream == stream_) return;
  // Order the new stream after everything queued so far (weight uploads,
  // kernels whose scratch is still being freed) without blocking the host.
  cudaEvent_t done = nullptr;
  cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (e == cudaSuccess) e = cudaEventRecord(done, stream_);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(stream, done, 0);
  if (done) (void)cudaEventDestroy(done);  // released once the wait has happened
  if (e != cudaSuccess) fail_cuda("cuda backend: set_stream", e);
  // Destroying a stream with queued work is allowed: it is released when that
  // work completes.
  if (own_stream_) (void)cudaStreamDestroy(stream_);
  own_stream_ = false;
  stream_ = stream;
}

}  // namespace h3s::cuda
