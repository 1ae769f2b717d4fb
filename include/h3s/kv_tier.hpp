// The K/V storage tier of a streamed block (docs/FEATURES.md "K/V storage
// tiers"): the exact bf16 store, or an approximate one. Within a tier a
// streamed block equals its stock block bit for bit; an approximate tier never
// gives the exact store's bits.
#pragma once

#include <cstdint>
#include <string_view>

namespace h3s {

enum class KvTier : uint8_t {
  bf16,    // exact
  kvi8r,   // approximate: int8 + one fp16 scale per row, Hadamard basis
  kvi8s,   // approximate: SageAttention-2's layout (int8 K, fp8 V)
  kvfp4s,  // approximate: NVFP4 K (rotated, centred) and V
  kvmix,   // approximate: per head kvi8s or kvfp4s
};

// "bf16", "kvi8r", ...: the names the CLI, the C ABI and Python take.
std::string_view kv_tier_name(KvTier t);
// The tier a name gives; throws Error(invalid_argument) naming the value and
// every tier.
KvTier parse_kv_tier(std::string_view name);

}  // namespace h3s
