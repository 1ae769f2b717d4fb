// The wgmma shared-memory descriptor and the 128-byte swizzle, checked on the
// CPU against the PTX ISA's field layout and CUTLASS's Swizzle<3,4,3>
// definition (the TMA unit writes that pattern; the kernels' descriptors and
// offsets must agree with it or every MMA reads the wrong bytes).
#include <gtest/gtest.h>

#include <cstdint>
#include <set>

#include "backend/cuda/arch/wgmma_desc.hpp"

namespace h3s::cuda::wgmma {
namespace {

uint32_t field(uint64_t d, int shift) {
  return uint32_t((d >> shift) & 0x3FFFu);
}

TEST(WgmmaDesc, FieldsSitWhereThePtxIsaPutsThem) {
  const uint64_t d = make_desc(0x12340u, 16384u, 1024u);
  EXPECT_EQ(field(d, 0), 0x1234u);       // start address >> 4, bits 0-13
  EXPECT_EQ(field(d, 16), 16384u >> 4);  // leading byte offset >> 4, bits 16-29
  EXPECT_EQ(field(d, 32), 1024u >> 4);   // stride byte offset >> 4, bits 32-45
  EXPECT_EQ(d >> 62, 1u);                // layout: 128-byte swizzle
  // Base offset (49-51) and the reserved bits stay zero, even for the
  // largest field values.
  const uint64_t big = make_desc(0x3FFF0u, 0x3FFF0u, 0x3FFF0u);
  const uint64_t fields = (uint64_t(0x3FFF) << 0) | (uint64_t(0x3FFF) << 16) |
                          (uint64_t(0x3FFF) << 32) | (uint64_t(3) << 62);
  EXPECT_EQ(big & ~fields, 0u);
  EXPECT_EQ(big & fields, fields & ~(uint64_t(2) << 62));
}

TEST(WgmmaDesc, AddressesAreSixteenByteUnits) {
  EXPECT_EQ(make_desc(0x12345u, 0, 0), make_desc(0x12340u, 0, 0));
  EXPECT_NE(make_desc(0x12350u, 0, 0), make_desc(0x12340u, 0, 0));
  // A k16 step of bf16 moves the start by 32 bytes: two units.
  EXPECT_EQ(field(make_desc(1024u + 32u, 0, 0), 0) - field(make_desc(1024u, 0, 0), 0), 2u);
}

// Swizzle<3,4,3>: byte address bits 4-6 are XORed with bits 7-9.
uint32_t cutlass_swizzle128(uint32_t byte_offset) {
  return byte_offset ^ (((byte_offset >> 7) & 7u) << 4);
}

TEST(WgmmaDesc, SwizzleOffsetsAreTheTmaPattern) {
  for (uint32_t row = 0; row < 64; ++row)
    for (uint32_t chunk = 0; chunk < 8; ++chunk)
      EXPECT_EQ(swizzle128_offset(row, chunk), cutlass_swizzle128(row * 128 + chunk * 16))
          << "row " << row << " chunk " << chunk;
}

TEST(WgmmaDesc, EightRowsOfOneChunkHitEightBankGroups) {
  // Why the swizzle exists: one 16-byte column of an 8-row atom (what an
  // ldmatrix or a wgmma core matrix reads) spans all 8 bank groups.
  for (uint32_t chunk = 0; chunk < 8; ++chunk) {
    std::set<uint32_t> groups;
    for (uint32_t row = 0; row < 8; ++row)
      groups.insert((swizzle128_offset(row, chunk) % 128) / 16);
    EXPECT_EQ(groups.size(), 8u) << "chunk " << chunk;
  }
}

}  // namespace
}  // namespace h3s::cuda::wgmma
