// H3S_HOST_DEVICE: a function both the kernels and the CPU test suite compile
// (descriptor encodings, arithmetic a kernel must reproduce bit for bit).
#pragma once

#if defined(__CUDACC__)
#define H3S_HOST_DEVICE __host__ __device__
#else
#define H3S_HOST_DEVICE
#endif
