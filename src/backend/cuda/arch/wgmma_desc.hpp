// Shared-memory matrix descriptors of wgmma (PTX ISA "Matrix Descriptor
// Format"), for both host and device code: the kernels build them, the CPU
// test suite checks the encoding without a GPU (tests/ops/test_wgmma_desc.cpp).
#pragma once

#include <cstdint>

#include "backend/cuda/arch/host_device.hpp"

namespace h3s::cuda::wgmma {

// 128-byte swizzle (the hardware's Swizzle<3,4,3> on byte addresses): in a
// 1024-byte-aligned atom of 8 rows x 128 bytes, 16-byte chunk c of row r
// lives at r * 128 + (c ^ r % 8) * 16.
inline constexpr int kSwizzleBytes = 128;
inline constexpr int kAtomRows = 8;
inline constexpr int kAtomBytes = kSwizzleBytes * kAtomRows;  // 1024
inline constexpr uint64_t kLayoutSwizzle128 = 1;              // descriptor bits 62-63

// Field positions (bits): start address 0-13, leading byte offset 16-29,
// stride byte offset 32-45, base offset 49-51, layout (swizzle) 62-63; the
// three byte quantities are stored >> 4 (16-byte units, 18-bit addresses).
inline constexpr int kStartShift = 0, kLboShift = 16, kSboShift = 32, kLayoutShift = 62;
inline constexpr uint32_t kField14 = 0x3FFFu;

// Descriptor of a shared-memory operand: start address, leading and stride
// byte offsets, 128-byte swizzle. The base-offset field stays 0: every start
// address used here is an atom base plus an offset inside its first
// 128-byte row.
H3S_HOST_DEVICE constexpr uint64_t make_desc(uint32_t smem_addr, uint32_t lbo_bytes,
                                             uint32_t sbo_bytes) {
  return (uint64_t((smem_addr >> 4) & kField14) << kStartShift) |
         (uint64_t((lbo_bytes >> 4) & kField14) << kLboShift) |
         (uint64_t((sbo_bytes >> 4) & kField14) << kSboShift) | (kLayoutSwizzle128 << kLayoutShift);
}

// The byte offset of 16-byte chunk c of row r in a 128-byte-swizzled tile
// of 128-byte rows (atoms stacked every 8 rows).
H3S_HOST_DEVICE constexpr uint32_t swizzle128_offset(uint32_t row, uint32_t chunk) {
  return row * kSwizzleBytes + ((chunk ^ (row % kAtomRows)) * 16);
}

}  // namespace h3s::cuda::wgmma
