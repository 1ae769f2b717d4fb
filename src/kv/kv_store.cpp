// make_resident_kv_store: a tier to its resident store (kv_store.hpp).
#include "kv/kv_store.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "kv/kv_tier_table.hpp"

namespace h3s {

void expect_kv_block(int64_t kv_block) {
  if (kv_block < 0 || kv_block % kAttnKvTile != 0)
    fail(ErrorKind::invalid_argument,
         "kv_block = {} must be 0 or a multiple of the {}-row attention tile (try {})", kv_block,
         kAttnKvTile, (kv_block + kAttnKvTile - 1) / kAttnKvTile * kAttnKvTile);
}

void expect_head_dim(KvTier tier, int64_t head_dim, int64_t dim) {
  if (head_dim != dim)
    fail(ErrorKind::invalid_argument, "{}: head_dim {} (the tier quantises {}-dim heads)",
         kv_tier_name(tier), head_dim, dim);
}

std::unique_ptr<KvStore> make_resident_kv_store(Backend& backend, Arena& arena, KvTier tier,
                                                int64_t seq, int64_t heads, int64_t head_dim,
                                                int64_t kv_block, std::span<const int> mix_heads) {
  const KvTierRow& row = kv_tier_row(tier);
  const KvStoreShape shape{.seq = seq,
                           .heads = heads,
                           .head_dim = head_dim,
                           .kv_block = kv_block,
                           .mix_heads = mix_heads};
  if (row.exact || backend.has_kv_tier(tier)) return row.make(arena, shape);
  static std::atomic<bool> said{false};  // one line per process, whichever engine says it
  if (!said.exchange(true)) {
    const std::string_view hint = backend.kv_tier_hint(tier);
    const std::string how = hint.empty() ? "" : fmt::format(" ({})", hint);
    fmt::print(stderr,
               "h3s: the {} backend has no {} kernels yet; using the exact bf16 K/V store{}\n",
               backend.name(), row.name, how);
  }
  return kv_tier_row(KvTier::bf16).make(arena, shape);
}

}  // namespace h3s
