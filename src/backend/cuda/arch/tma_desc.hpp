// Host side of TMA: encodes CUtensorMap descriptors for the tensors the
// kernels load (bf16 tiles, 128-byte swizzled; int8 code tiles, unswizzled). The driver entry point
// is looked up through the runtime (cudaGetDriverEntryPointByVersion), so nothing links libcuda
// directly and a machine without a driver still loads the library.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace h3s::cuda::arch {

// A rank-3 tensor: extents (innermost first) and the byte strides of
// dimensions 1 and 2 (dimension 0 is contiguous).
struct Tensor3d {
  const void* base;
  uint64_t extent[3];
  uint64_t stride_bytes[2];
};

// A map whose box is box[0] x box[1] x box[2] elements, 128-byte swizzled
// (box[0] * 2 bytes must be 128: one swizzle row per box row). Throws
// h3s::Error naming the field that the hardware rejects (alignment, stride
// or extent limits) instead of a bare CUresult.
CUtensorMap encode_bf16_swizzle128(const Tensor3d& t, const uint32_t (&box)[3], const char* what);

// The same tensor shape over bytes (int8 or fp8 codes), unswizzled: a box
// lands as box[2] rows of box[0] * box[1] contiguous bytes (box[0] a
// multiple of 16).
CUtensorMap encode_u8(const Tensor3d& t, const uint32_t (&box)[3], const char* what);

// Bytes again, 128-byte swizzled like encode_bf16_swizzle128 (box[0] = 128:
// one swizzle row per box row): int8 and fp8 wgmma operands.
CUtensorMap encode_u8_swizzle128(const Tensor3d& t, const uint32_t (&box)[3], const char* what);

}  // namespace h3s::cuda::arch
