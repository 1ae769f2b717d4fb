// ExecOptions validation.
#include "h3s/options.hpp"

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "kv/kv_tier_table.hpp"

namespace h3s {

std::string_view final_gemm_name(FinalLayerGemm g) {
  return g == FinalLayerGemm::exact ? "exact" : "streamed";
}

FinalLayerGemm parse_final_gemm(std::string_view s) {
  if (s == "exact") return FinalLayerGemm::exact;
  if (s == "streamed") return FinalLayerGemm::streamed;
  fail(ErrorKind::invalid_argument, "final_layer_gemm '{}' is not valid: use exact or streamed", s);
}

std::string_view kv_placement_name(KvPlacement p) {
  switch (p) {
    case KvPlacement::device:
      return "device";
    case KvPlacement::host:
      return "host";
    default:
      return "auto";
  }
}

KvPlacement parse_kv_placement(std::string_view s) {
  if (s == "auto") return KvPlacement::automatic;
  if (s == "device") return KvPlacement::device;
  if (s == "host") return KvPlacement::host;
  fail(ErrorKind::invalid_argument, "kv_placement '{}' is not valid: use auto, device or host", s);
}

std::string_view attn_kernel_name(AttnKernel k) {
  switch (k) {
    case AttnKernel::sm80:
      return "sm80";
    case AttnKernel::sm90:
      return "sm90";
    case AttnKernel::sm80_one_slab:
      return "sm80-1slab";
    default:
      return "default";
  }
}

AttnKernel parse_attn_kernel(std::string_view s) {
  if (s == "default") return AttnKernel::automatic;
  if (s == "sm80") return AttnKernel::sm80;
  if (s == "sm90") return AttnKernel::sm90;
  if (s == "sm80-1slab") return AttnKernel::sm80_one_slab;
  fail(ErrorKind::invalid_argument,
       "attn_kernel '{}' is not valid: use default, sm80, sm90 or sm80-1slab", s);
}

std::string_view gemm_kernel_name(GemmKernel k) {
  return k == GemmKernel::sm80 ? "sm80" : "default";
}

GemmKernel parse_gemm_kernel(std::string_view s) {
  if (s == "default") return GemmKernel::automatic;
  if (s == "sm80") return GemmKernel::sm80;
  fail(ErrorKind::invalid_argument, "gemm_kernel '{}' is not valid: use default or sm80", s);
}

void ExecOptions::validate() const {
  auto range = [](const char* name, int64_t v, int64_t lo) {
    if (v < lo)
      fail(ErrorKind::invalid_argument, "{} = {} is out of range: it must be >= {}", name, v, lo);
  };
  range("q_chunk", q_chunk, 1);
  range("kv_chunk", kv_chunk, 1);
  range("mlp_chunk", mlp_chunk, 0);
  range("min_tokens", min_tokens, 0);
  range("kv_block", kv_block, 0);
  range("final_layer_chunk", final_layer_chunk, 0);
  range("merge_tail_below", merge_tail_below, 0);
  if (kv_block % kAttnKvTile != 0)
    fail(ErrorKind::invalid_argument,
         "kv_block = {} must be 0 or a multiple of the {}-row attention tile (try {})", kv_block,
         kAttnKvTile, (kv_block + kAttnKvTile - 1) / kAttnKvTile * kAttnKvTile);
  kv_tier_row(kv_store);  // throws for a value that is not a tier (a cast)
  range("kv_mix_count", kv_mix_count, 0);
  for (size_t i = 0; i < kv_mix_heads.size(); ++i) {
    if (kv_mix_heads[i] < 0)
      fail(ErrorKind::invalid_argument, "kv_mix_heads: head {} is negative", kv_mix_heads[i]);
    for (size_t j = 0; j < i; ++j)
      if (kv_mix_heads[j] == kv_mix_heads[i])
        fail(ErrorKind::invalid_argument, "kv_mix_heads: head {} is listed twice", kv_mix_heads[i]);
  }
  if (!kv_mix_heads.empty() && kv_mix_count != 0 && size_t(kv_mix_count) != kv_mix_heads.size())
    fail(ErrorKind::invalid_argument,
         "kv_mix_count = {} but kv_mix_heads lists {} heads: give the heads or the count, not both",
         kv_mix_count, kv_mix_heads.size());
  if (attn_kernel > AttnKernel::sm80_one_slab || gemm_kernel > GemmKernel::sm80)
    fail(ErrorKind::invalid_argument, "attn_kernel {} / gemm_kernel {} is not a kernel choice",
         int(attn_kernel), int(gemm_kernel));
  if (!kv_tier_exact(kv_store) && kv_placement == KvPlacement::host)
    fail(ErrorKind::invalid_argument,
         "kv_store '{}' with kv_placement = host: host-staged K/V holds the exact bf16 tier "
         "only; use kv_placement auto or device",
         kv_tier_name(kv_store));
}

ExecOptions ExecOptions::stock() {
  ExecOptions o;
  o.mode = ExecMode::stock;
  o.final_layer_chunk = 0;
  o.trim_forward = false;
  return o;
}

}  // namespace h3s
