// Stock vs streamed on one block, in ulps.
#include "exec/self_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "kv/kv_tier_table.hpp"

namespace h3s {

int64_t bf16_ulp_distance(uint16_t a, uint16_t b) {
  const bool nan_a = (a & 0x7fff) > 0x7f80, nan_b = (b & 0x7fff) > 0x7f80;
  if (nan_a || nan_b) return nan_a && nan_b ? 0 : 0xffff;
  // Map sign-magnitude bits onto a monotonic integer line (+0 and -0 meet).
  auto ordered = [](uint16_t v) { return (v & 0x8000) ? -int64_t(v & 0x7fff) : int64_t(v); };
  return std::llabs(ordered(a) - ordered(b));
}

bool SelfCheckResult::all_equal() const {
  for (const Variant& v : variants)
    if (v.differing != 0) return false;
  return true;
}

std::string SelfCheckResult::line(int64_t tokens) const {
  std::string s = fmt::format("self_check block 0 ({} tokens) stock vs streamed:", tokens);
  std::string diverged;
  for (const Variant& v : variants) {
    s += fmt::format(" {} {} differ, max {} mean {:.3g} ulp;", v.name, v.differing, v.max_ulp,
                     v.mean_ulp);
    if (v.differing != 0) diverged += (diverged.empty() ? "" : ", ") + v.name;
  }
  s += diverged.empty() ? " bit-equal" : fmt::format(" DIVERGED ({})", diverged);
  if (tier)
    s += fmt::format(
        "; kv_store {} (approximate) vs the exact store: rel-rms {:.3g}, max |d| {:.3g}",
        kv_tier_name(tier->store), tier->rel_rms, tier->max_abs);
  if (tier_fallback)
    s += fmt::format("; kv_store {} has no kernel on this backend: the exact store ran",
                     kv_tier_name(*tier_fallback));
  return s;
}

SelfCheckResult::Variant compare_bf16_bits(std::string name, std::span<const uint16_t> ref,
                                           std::span<const uint16_t> got) {
  H3S_CHECK(ref.size() == got.size());
  SelfCheckResult::Variant out{std::move(name), 0, 0.0, 0};
  double sum = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    out.differing += ref[i] != got[i];
    const int64_t d = bf16_ulp_distance(ref[i], got[i]);
    out.max_ulp = std::max(out.max_ulp, d);
    sum += double(d);
  }
  out.mean_ulp = got.empty() ? 0.0 : sum / double(got.size());
  return out;
}

SelfCheckResult self_check_block(Backend& be, Arena& arena, const BlockView& block, const Tensor& x,
                                 const ExecOptions& o, std::span<const RowRange> exact_rows,
                                 std::span<const int> mix_heads) {
  BlockView quiet = block;
  quiet.block_index = -1;  // keep the side runs out of the phase ledger
  const int64_t seq = x.rows(), n = x.numel();
  const BlockKv tier{o.kv_store, exact_rows, mix_heads};
  auto run_copy = [&](const StreamChunks* chunks, std::vector<uint16_t>& host,
                      const BlockKv& stock_tier) {
    OwnedTensor y = arena.tensor(DType::bf16, {seq, x.cols()}, "self_check copy of x");
    be.copy(x, y.view);
    if (chunks)
      run_block_streamed(be, arena, quiet, y.view, *chunks);
    else
      run_block_stock(be, arena, quiet, y.view, BlockPhases::all, stock_tier);
    host.resize(size_t(n));
    be.download(y.view, host.data());
  };
  std::vector<uint16_t> ref, got;
  run_copy(nullptr, ref, tier);
  StreamChunks full = StreamChunks::from(o);
  full.exact_rows.assign(exact_rows.begin(), exact_rows.end());
  full.kv_mix_heads.assign(mix_heads.begin(), mix_heads.end());
  // Every variant runs the checked tier (and its exact rows).
  const auto with_tier = [&](StreamChunks c) {
    c.kv_store = full.kv_store;
    c.exact_rows = full.exact_rows;
    c.kv_mix_heads = full.kv_mix_heads;
    return c;
  };
  const int64_t whole = seq;  // one chunk
  const int64_t merge = full.merge_tail_below;
  const struct {
    const char* name;
    StreamChunks c;
  } variants[] = {
      {"full", full},
      {"q_only", with_tier({.q_chunk = full.q_chunk,
                            .kv_chunk = whole,
                            .mlp_chunk = whole,
                            .merge_tail_below = merge})},
      {"kv_only", with_tier({.q_chunk = whole,
                             .kv_chunk = full.kv_chunk,
                             .mlp_chunk = whole,
                             .merge_tail_below = merge})},
      {"mlp_only", with_tier({.q_chunk = whole,
                              .kv_chunk = whole,
                              .mlp_chunk = full.mlp_chunk == 0 ? whole : full.mlp_chunk,
                              .merge_tail_below = merge})},
      {"none", with_tier({.q_chunk = whole, .kv_chunk = whole, .mlp_chunk = whole})},
  };
  SelfCheckResult r;
  for (const auto& v : variants) {
    run_copy(&v.c, got, tier);
    r.variants.push_back(compare_bf16_bits(v.name, ref, got));
  }
  if (!kv_tier_exact(o.kv_store)) {
    if (!be.has_kv_tier(o.kv_store)) {
      r.tier_fallback = o.kv_store;
    } else {
      // The tier's error: its stock block against the exact store's.
      run_copy(nullptr, got, BlockKv{KvTier::bf16});
      double num = 0.0, den = 0.0, max_abs = 0.0;
      for (size_t i = 0; i < got.size(); ++i) {
        const double a = bf16_to_f32(bf16{ref[i]}), b = bf16_to_f32(bf16{got[i]});
        num += (a - b) * (a - b);
        den += b * b;
        max_abs = std::max(max_abs, std::fabs(a - b));
      }
      r.tier = SelfCheckResult::TierError{
          o.kv_store, den > 0.0 ? std::sqrt(num / den) : std::sqrt(num), max_abs};
    }
  }
  return r;
}

}  // namespace h3s
