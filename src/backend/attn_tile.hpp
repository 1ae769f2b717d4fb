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

// Keys of every head a backend's decode path for a K/V tier (CUDA's kvfp4s,
// and kvi8r off Hopper) decodes at once (Backend::kv_tier_decode_keys;
// backend/cuda/kernel_choice.hpp decides which): 4096 (2 x 4096 x 7168 x 2 B
// = 117 MB of scratch at H3's width, what a 16 GB card can spare), and 16384
// for kvfp4s on Hopper (470 MB; 5% faster there, docs/PERFORMANCE.md
// "kvfp4s"), the most a plan made without a device counts. Multiples of the
// tile, so every decode block starts on one.
inline constexpr int64_t kKvDecodeKeys = 4096;
inline constexpr int64_t kKvDecodeKeysHopper = 16384;
static_assert(kKvDecodeKeys % kAttnKvTile == 0 && kKvDecodeKeysHopper % kAttnKvTile == 0,
              "decode blocks start on attention tiles");

}  // namespace h3s
