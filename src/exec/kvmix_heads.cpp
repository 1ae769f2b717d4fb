// kvmix's head sets (see kvmix_heads.hpp).
#include "exec/kvmix_heads.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <optional>

#include "exec/block_steps.hpp"
#include "kvfmt/kvmix.hpp"

namespace h3s {

std::vector<int> calibrate_kvmix(Backend& be, Arena& arena, const BlockView& b, ResidualRows& x,
                                 int64_t count) {
  const int64_t inner = b.heads * b.head_dim;
  const std::vector<RowRange> windows = kvmix::sample_windows(x.rows());
  int64_t n = 0;
  for (const RowRange& r : windows) n += r.size();
  std::vector<uint16_t> q(size_t(n * inner)), k(q.size()), v(q.size());
  std::vector<int64_t> window_rows;
  std::vector<uint16_t> qkv_host;
  int64_t at = 0;
  for (const RowRange& r : windows) {
    OwnedTensor qkv;
    {
      const ResidualRows::Lease xr = x.fetch(r);
      qkv = steps::fused_qkv(be, arena, b, xr.view, r);
    }
    qkv_host.resize(size_t(r.size() * 3 * inner));
    be.download(qkv.view, qkv_host.data());
    for (int64_t i = 0; i < r.size(); ++i) {
      const uint16_t* src = &qkv_host[size_t(i * 3 * inner)];
      const size_t dst = size_t((at + i) * inner);
      std::copy(src, src + inner, &q[dst]);
      std::copy(src + inner, src + 2 * inner, &k[dst]);
      std::copy(src + 2 * inner, src + 3 * inner, &v[dst]);
    }
    window_rows.push_back(r.size());
    at += r.size();
  }
  // The CPU backend's pool (the engine's threads), else the host's cores: ~3 s
  // a block on one core at H3's 56 heads.
  std::optional<ThreadPool> own;
  ThreadPool* pool = be.host_pool();
  if (pool == nullptr) pool = &own.emplace(0);
  const std::vector<double> score =
      kvmix::fp4_sensitivity(q.data(), k.data(), v.data(), inner, window_rows, b.heads, pool);
  return kvmix::pick_8bit_heads(score, count);
}

std::vector<int> KvMixHeads::for_block(Backend& be, Arena& arena, const BlockView& b,
                                       ResidualRows& x, const ExecOptions& o) {
  if (o.kv_store != KvTier::kvmix) return {};
  if (!o.kv_mix_heads.empty()) {
    kvmix::check_heads(o.kv_mix_heads, b.heads);
    return o.kv_mix_heads;
  }
  const int64_t count = o.kv_mix_count > 0 ? o.kv_mix_count : kvmix::default_8bit_count(b.heads);
  if (b.block_index >= 0) {
    const auto kept = kept_.find(b.block_index);
    if (kept != kept_.end() && kept->second.count == count) return kept->second.heads;
  }
  if (count > b.heads)
    fail(ErrorKind::invalid_argument,
         "kv_mix_count = {} is more than the model's {} heads: give at most {} (or 0 for half)",
         count, b.heads, b.heads);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> heads8 = calibrate_kvmix(be, arena, b, x, count);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (b.block_index >= 0) {
    int64_t sampled = 0;
    for (const RowRange& r : kvmix::sample_windows(x.rows())) sampled += r.size();
    fmt::print(stderr,
               "h3s: kvmix block {}: heads on 8 bits {} (calibrated on {} sample rows in {:.0f} "
               "ms)\n",
               b.block_index, kvmix::format_heads(heads8), sampled, ms);
    kept_[b.block_index] = {count, heads8};
  }
  return heads8;
}

std::map<int, std::vector<int>> KvMixHeads::kept() const {
  std::map<int, std::vector<int>> sets;
  for (const auto& [block, k] : kept_) sets[block] = k.heads;
  return sets;
}

std::vector<int> KvMixHeads::for_block(Backend& be, Arena& arena, const BlockView& b,
                                       const Tensor& x, const ExecOptions& o) {
  ResidualRows rows(x);
  return for_block(be, arena, b, rows, o);
}

}  // namespace h3s
