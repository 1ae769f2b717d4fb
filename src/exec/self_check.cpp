// Stock vs streamed on one block, in ulps.
#include "exec/self_check.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "core/error.hpp"

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
                                 const ExecOptions& o) {
  BlockView quiet = block;
  quiet.block_index = -1;  // keep the side runs out of the phase ledger
  const int64_t seq = x.rows(), n = x.numel();
  auto run_copy = [&](const StreamChunks* chunks, std::vector<uint16_t>& host) {
    OwnedTensor y = arena.tensor(DType::bf16, {seq, x.cols()}, "self_check copy of x");
    be.copy(x, y.view);
    if (chunks)
      run_block_streamed(be, arena, quiet, y.view, *chunks);
    else
      run_block_stock(be, arena, quiet, y.view, BlockPhases::all, o.kv_store);
    host.resize(size_t(n));
    be.download(y.view, host.data());
  };
  std::vector<uint16_t> ref, got;
  run_copy(nullptr, ref);
  const StreamChunks full = StreamChunks::from(o);
  const int64_t whole = seq;  // one chunk
  const int64_t merge = full.merge_tail_below;
  const struct {
    const char* name;
    StreamChunks c;
  } variants[] = {
      {"full", full},
      {"q_only",
       {.q_chunk = full.q_chunk, .kv_chunk = whole, .mlp_chunk = whole, .merge_tail_below = merge}},
      {"kv_only",
       {.q_chunk = whole,
        .kv_chunk = full.kv_chunk,
        .mlp_chunk = whole,
        .merge_tail_below = merge}},
      {"mlp_only",
       {.q_chunk = whole,
        .kv_chunk = whole,
        .mlp_chunk = full.mlp_chunk == 0 ? whole : full.mlp_chunk,
        .merge_tail_below = merge}},
      {"none", {.q_chunk = whole, .kv_chunk = whole, .mlp_chunk = whole}},
  };
  SelfCheckResult r;
  for (const auto& v : variants) {
    run_copy(&v.c, got);
    r.variants.push_back(compare_bf16_bits(v.name, ref, got));
  }
  return r;
}

}  // namespace h3s
