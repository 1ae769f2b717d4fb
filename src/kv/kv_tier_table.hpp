// The K/V tiers, one row each: the one place a tier is named and described.
// Everything below the parsers (the CLI, the C ABI, Python) carries a tier as
// KvTier (h3s/kv_tier.hpp) and asks this table; which backend runs which tier
// is the backend's answer (Backend::has_kv_tier).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "h3s/kv_tier.hpp"

namespace h3s {

class Arena;
class KvStore;

// What a tier's resident store holds: `seq` rows of `heads` heads of
// `head_dim`. kvmix also needs its heads on 8 bits: the set to make a store,
// their count (and the rows of the largest chunk its gathers take) to size one.
struct KvStoreShape {
  int64_t seq = 0, heads = 0, head_dim = 0;
  int64_t kv_block = 0;                 // keys per attention pass (0: one pass)
  std::span<const int> mix_heads = {};  // kvmix, made: the heads on 8 bits
  int64_t mix_count = 0;                // kvmix, sized: how many heads on 8 bits
  int64_t chunk_rows = 0;               // kvmix, sized: the largest chunk's rows
};

struct KvTierRow {
  KvTier tier;
  std::string_view name;  // what the parsers take and every message prints
  bool exact;             // false: approximate (its own bits, never the exact store's)
  // Device bytes of the tier's resident store (the planner's figure: codes,
  // scales, kept tails; kvmix's chunk gathers).
  size_t (*store_bytes)(const KvStoreShape& shape);
  // The tier's resident store on `arena` (kv_store.hpp's make_resident_kv_store
  // asks the backend first).
  std::unique_ptr<KvStore> (*make)(Arena& arena, const KvStoreShape& shape);
};

// Every tier, in KvTier's order.
std::span<const KvTierRow> kv_tier_rows();
// Whether `t` is one of the enum's tiers (a cast may make any byte a KvTier).
bool is_kv_tier(KvTier t);
// `t`'s row; throws Error(invalid_argument) for a value that is not a tier.
const KvTierRow& kv_tier_row(KvTier t);
inline bool kv_tier_exact(KvTier t) {
  return kv_tier_row(t).exact;
}
// The tiers for a message: "'bf16' (exact), 'kvi8r', ... and 'kvmix' (approximate)".
std::string kv_tier_choices();

}  // namespace h3s
