// make_resident_kv_store: the tier name to its resident store (kv_store.hpp).
#include "kv/kv_store.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "kv/kv_bf16.hpp"
#include "kv/kv_fp4s.hpp"
#include "kv/kv_i8r.hpp"
#include "kv/kv_i8s.hpp"
#include "kv/kv_mix.hpp"

namespace h3s {

bool is_kv_tier(std::string_view tier) {
  return tier == "bf16" || tier == "kvi8r" || tier == "kvi8s" || tier == "kvfp4s" ||
         tier == "kvmix";
}

std::unique_ptr<KvStore> make_resident_kv_store(Backend& backend, Arena& arena,
                                                std::string_view tier, int64_t seq, int64_t heads,
                                                int64_t head_dim, int64_t kv_block,
                                                std::span<const int> mix_heads) {
  if (!is_kv_tier(tier))
    fail(ErrorKind::invalid_argument,
         "kv_store '{}' is not a K/V tier (bf16, kvi8r, kvi8s, kvfp4s, kvmix)", tier);
  if (tier == "bf16") return std::make_unique<KvBf16Store>(arena, seq, heads, head_dim, kv_block);
  if (backend.has_kv_tier(tier)) {
    if (tier == "kvi8r") return std::make_unique<KvI8rStore>(arena, seq, heads, head_dim, kv_block);
    if (tier == "kvi8s") return std::make_unique<KvI8sStore>(arena, seq, heads, head_dim, kv_block);
    if (tier == "kvfp4s")
      return std::make_unique<KvFp4sStore>(arena, seq, heads, head_dim, kv_block);
    return std::make_unique<KvMixStore>(arena, seq, heads, head_dim, kv_block, mix_heads);
  }
  static std::atomic<bool> said{false};  // one line per process, whichever engine says it
  if (!said.exchange(true)) {
    const std::string_view hint = backend.kv_tier_hint(tier);
    const std::string how = hint.empty() ? "" : fmt::format(" ({})", hint);
    fmt::print(stderr,
               "h3s: the {} backend has no {} kernels yet; using the exact bf16 K/V store{}\n",
               backend.name(), tier, how);
  }
  return std::make_unique<KvBf16Store>(arena, seq, heads, head_dim, kv_block);
}

}  // namespace h3s
