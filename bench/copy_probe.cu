// copy_probe: does a copy between pinned host memory and the device block the
// host thread that issues it? The stage queue (cuda_staging.cpp) relies on
// its copies returning at once; this times the host inside each call and the
// copy on the device, for cudaMemcpyAsync and cudaMemcpy2DAsync (pitch ==
// width, and a strided one) in each direction, on a non-blocking stream,
// with a kernel busy on another stream. One JSON line per case.
//   build and run (on the GPU machine): nvcc -O2 -arch=sm_90a -o /tmp/copy_probe
//   bench/copy_probe.cu && /tmp/copy_probe [MiB]
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                    \
  do {                                                              \
    cudaError_t e_ = (x);                                           \
    if (e_ != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                 \
    }                                                               \
  } while (0)

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? size_t(std::atol(argv[1])) : 448;
  const size_t bytes = mib << 20, row = 28672, rows = bytes / row / 2;
  void *host = nullptr, *dev = nullptr;
  CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocPortable));
  CHECK(cudaMalloc(&dev, bytes));
  cudaStream_t copy, compute;
  CHECK(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  struct Case {
    const char* name;
    bool to_host, two_d, strided;
  } cases[] = {{"1d_d2h", true, false, false},       {"2d_d2h", true, true, false},
               {"2d_d2h_strided", true, true, true}, {"1d_h2d", false, false, false},
               {"2d_h2d", false, true, false},       {"2d_h2d_strided", false, true, true}};
  for (int rep = 0; rep < 2; ++rep)
    for (const Case& c : cases) {
      spin<<<1, 1, 0, compute>>>(2000000000LL);  // ~1 s busy beside the copy
      CHECK(cudaEventRecord(a, copy));
      const auto t0 = std::chrono::steady_clock::now();
      size_t moved = 0;
      void* dst = c.to_host ? host : dev;
      const void* src = c.to_host ? dev : host;
      const cudaMemcpyKind kind = c.to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
      if (!c.two_d) {
        moved = bytes;
        CHECK(cudaMemcpyAsync(dst, src, bytes, kind, copy));
      } else if (!c.strided) {
        moved = 2 * rows * row;
        CHECK(cudaMemcpy2DAsync(dst, row, src, row, row, 2 * rows, kind, copy));
      } else {  // half of each 2 * row line: K of a K,V row
        moved = rows * row;
        CHECK(cudaMemcpy2DAsync(dst, 2 * row, src, 2 * row, row, rows, kind, copy));
      }
      const double host_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      CHECK(cudaEventRecord(b, copy));
      CHECK(cudaEventSynchronize(b));
      float dev_ms = 0;
      CHECK(cudaEventElapsedTime(&dev_ms, a, b));
      CHECK(cudaStreamSynchronize(compute));
      if (rep == 1)
        std::printf(
            "{\"case\": \"%s\", \"bytes\": %zu, \"host_call_ms\": %.3f, \"copy_ms\": %.3f, "
            "\"gb_s\": %.2f}\n",
            c.name, moved, host_ms, double(dev_ms), double(moved) / (double(dev_ms) * 1e6));
    }
  return 0;
}
