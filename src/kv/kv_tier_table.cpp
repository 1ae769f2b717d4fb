// The K/V tiers' table (kv_tier_table.hpp) and the public names of
// h3s/kv_tier.hpp, which read it.
#include "kv/kv_tier_table.hpp"

#include <array>
#include <vector>

#include "core/error.hpp"
#include "kv/kv_bf16.hpp"
#include "kv/kv_fp4s.hpp"
#include "kv/kv_i8r.hpp"
#include "kv/kv_i8s.hpp"
#include "kv/kv_mix.hpp"

namespace h3s {

namespace {

// The stores of the tiers without a head set: a shape's first fields.
template <class Store>
std::unique_ptr<KvStore> make_store(Arena& arena, const KvStoreShape& s) {
  return std::make_unique<Store>(arena, s.seq, s.heads, s.head_dim, s.kv_block);
}
template <class Store>
size_t store_bytes(const KvStoreShape& s) {
  return Store::bytes(s.seq, s.heads, s.head_dim);
}

std::unique_ptr<KvStore> make_mix(Arena& arena, const KvStoreShape& s) {
  return std::make_unique<KvMixStore>(arena, s.seq, s.heads, s.head_dim, s.kv_block, s.mix_heads);
}
// The two sub-stores, plus the gathers of one chunk.
size_t mix_bytes(const KvStoreShape& s) {
  return KvMixStore::bytes(s.seq, s.heads, s.head_dim, s.mix_count) +
         KvMixStore::chunk_bytes(s.chunk_rows, s.heads, s.head_dim, s.mix_count);
}

constexpr std::array<KvTierRow, 5> kRows{{
    {KvTier::bf16, "bf16", true, store_bytes<KvBf16Store>, make_store<KvBf16Store>},
    {KvTier::kvi8r, "kvi8r", false, store_bytes<KvI8rStore>, make_store<KvI8rStore>},
    {KvTier::kvi8s, "kvi8s", false, store_bytes<KvI8sStore>, make_store<KvI8sStore>},
    {KvTier::kvfp4s, "kvfp4s", false, store_bytes<KvFp4sStore>, make_store<KvFp4sStore>},
    {KvTier::kvmix, "kvmix", false, mix_bytes, make_mix},
}};
static_assert(
    [] {
      for (size_t i = 0; i < kRows.size(); ++i)
        if (size_t(kRows[i].tier) != i) return false;
      return true;
    }(),
    "kRows lists the tiers in KvTier's order");

// "'a', 'b' and 'c'" of the rows with exact == `exact`.
std::string quoted_names(bool exact) {
  std::vector<std::string_view> names;
  for (const KvTierRow& r : kRows)
    if (r.exact == exact) names.push_back(r.name);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i)
    s += fmt::format("{}'{}'", i == 0 ? "" : i + 1 == names.size() ? " and " : ", ", names[i]);
  return s;
}

}  // namespace

std::span<const KvTierRow> kv_tier_rows() {
  return kRows;
}

bool is_kv_tier(KvTier t) {
  return size_t(t) < kRows.size();
}

const KvTierRow& kv_tier_row(KvTier t) {
  if (!is_kv_tier(t))
    fail(ErrorKind::invalid_argument, "kv_store {} is not a K/V tier: use {}", int(t),
         kv_tier_choices());
  return kRows[size_t(t)];
}

std::string kv_tier_choices() {
  return quoted_names(true) + " (exact), " + quoted_names(false) + " (approximate)";
}

std::string_view kv_tier_name(KvTier t) {
  return kv_tier_row(t).name;
}

KvTier parse_kv_tier(std::string_view name) {
  for (const KvTierRow& r : kRows)
    if (r.name == name) return r.tier;
  fail(ErrorKind::invalid_argument, "kv_store '{}' is not available: this build has {}", name,
       kv_tier_choices());
}

}  // namespace h3s
