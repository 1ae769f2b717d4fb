// Stock vs streamed on one block, in ulps.
#include "exec/self_check.hpp"

#include <fmt/format.h>

#include <cstdlib>

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
    if (v.max_ulp != 0) return false;
  return true;
}

std::string SelfCheckResult::line(int64_t tokens) const {
  std::string s = fmt::format("self_check block 0 ({} tokens) stock vs streamed:", tokens);
  for (const Variant& v : variants)
    s += fmt::format(" {} max {} mean {:.3g} ulp;", v.name, v.max_ulp, v.mean_ulp);
  s += all_equal() ? " bit-equal" : " DIVERGED";
  return s;
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
      run_block_stock(be, arena, quiet, y.view);
    host.resize(size_t(n));
    be.download(y.view, host.data());
  };
  std::vector<uint16_t> ref, got;
  run_copy(nullptr, ref);
  const StreamChunks full = StreamChunks::from(o);
  const int64_t whole = seq;  // one chunk
  const struct {
    const char* name;
    StreamChunks c;
  } variants[] = {
      {"full", full},
      {"q_only", {full.q_chunk, whole, whole, 0, full.merge_tail_below}},
      {"kv_only", {whole, full.kv_chunk, whole, 0, full.merge_tail_below}},
      {"mlp_only",
       {whole, whole, full.mlp_chunk == 0 ? whole : full.mlp_chunk, 0, full.merge_tail_below}},
      {"none", {whole, whole, whole, 0, 0}},
  };
  SelfCheckResult r;
  for (const auto& v : variants) {
    run_copy(&v.c, got);
    SelfCheckResult::Variant out{v.name, 0, 0.0};
    double sum = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      const int64_t d = bf16_ulp_distance(ref[i], got[i]);
      out.max_ulp = std::max(out.max_ulp, d);
      sum += double(d);
    }
    out.mean_ulp = got.empty() ? 0.0 : sum / double(got.size());
    r.variants.push_back(out);
  }
  return r;
}

}  // namespace h3s
