// The approximate K/V tiers' ops for backends without kernels for them: a
// clear refusal (the executor checks has_kv_tier() first and falls back to
// the exact store, so reaching these is a caller's bug).
#include "backend/backend.hpp"
#include "core/error.hpp"

namespace h3s {
namespace {
[[noreturn]] void no_tier(const Backend& be, const char* op) {
  fail(ErrorKind::invalid_argument,
       "{}: the {} backend has no kernels for this K/V tier (check has_kv_tier first; use "
       "kv_store 'bf16')",
       op, be.name());
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
void Backend::kvi8r_decode(const KvI8View&, RowRange, const Tensor&, const Tensor&) {
  no_tier(*this, "kvi8r_decode");
}

void Backend::kvi8s_quantize(std::span<const Tensor>, std::span<const Tensor>, int64_t,
                             const KvI8sView&) {
  no_tier(*this, "kvi8s_quantize");
}
void Backend::attention_kvi8s(const Tensor&, const KvI8sView&, RowRange, AttnState&) {
  no_tier(*this, "attention_kvi8s");
}

void Backend::kvfp4s_quantize(std::span<const Tensor>, std::span<const Tensor>, int64_t,
                              const KvFp4sView&) {
  no_tier(*this, "kvfp4s_quantize");
}
void Backend::attention_kvfp4s(const Tensor&, const KvFp4sView&, RowRange, AttnState&) {
  no_tier(*this, "attention_kvfp4s");
}
void Backend::kvfp4s_decode(const KvFp4sView&, RowRange, const Tensor&, const Tensor&) {
  no_tier(*this, "kvfp4s_decode");
}

}  // namespace h3s
