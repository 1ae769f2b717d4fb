// The attention's K/V tile, stated once for the C++ tree and nvcc alike (no
// includes: backend.hpp pulls in fmt, which nvcc cannot compile).
//
// K/V blocks start on multiples of this many keys. Every backend consumes
// keys in tiles counted from key 0 whose size divides it (CPU 128, CUDA wgmma
// 128, CUDA mma.sync 64), so a block boundary is a tile boundary and blocked
// consumption repeats the single-pass arithmetic exactly (docs/DESIGN.md,
// invariant 2).
#pragma once

#include <cstdint>

namespace h3s {

inline constexpr int64_t kAttnKvTile = 128;

}  // namespace h3s
