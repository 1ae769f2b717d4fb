// The approximate K/V tiers' ops for backends without kernels for them: a
// clear refusal (the executor checks has_kv_tier() first and falls back to
// the exact store, so reaching these is a caller's bug).
#include "backend/backend.hpp"
#include "core/error.hpp"

namespace h3s {
namespace {
[[noreturn]] void no_tier(const Backend& be, const char* op) {
  fail(ErrorKind::invalid_argument,
       "{}: the {} backend has no kvi8r kernels (check has_kv_tier first; use kv_store 'bf16')", op,
       be.name());
}
}  // namespace

void Backend::kvi8r_quantize(const Tensor&, const Tensor&, const Tensor&) {
  no_tier(*this, "kvi8r_quantize");
}
void Backend::rotate_heads(const Tensor&) {
  no_tier(*this, "rotate_heads");
}
void Backend::attention_kvi8r(const Tensor&, const KvI8View&, RowRange, AttnState&) {
  no_tier(*this, "attention_kvi8r");
}
void Backend::attn_state_finish_rotated(const AttnState&, const Tensor&) {
  no_tier(*this, "attn_state_finish_rotated");
}

}  // namespace h3s
