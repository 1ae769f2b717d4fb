// Which attention forward runs on this device, and the checks every kernel
// relies on. One choice per device, never per call shape, so every call on a
// device (stock, streamed, any chunk) runs the same arithmetic:
//   sm_90 (Hopper)  the warp-specialised TMA kernel (attn_fwd_ws_sm90.cu)
//   other sm_80+    the mma.sync kernel (attn_fwd_sm80.cu; also Hopper running
//                   the compute_80 PTX, arch/device_arch.hpp)
// H3S_ATTN_KERNEL picks another for comparison runs (h3s bench measures each
// in its own process): ws (the default variant), ws-s2, ws-s3, ws-s2-nopp,
// ws-s3-nopp, wgmma (the cp.async wgmma kernel, attn_fwd_sm90.cu), sm80.
// H3S_ATTN_SM80=1 is the older spelling of sm80. fp16 K/V (kvi8r's decode
// path) always take the mma.sync kernel's fp16 instance: the only one.
#include <cstdlib>
#include <string>
#include <string_view>

#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.hpp"
#include "core/error.hpp"

namespace h3s::cuda {
namespace {

enum class AttnKernel { ws_sm90, wgmma_sm90, mma_sm80 };

struct AttnChoice {
  AttnKernel kernel;
  attn::AttnWsVariant variant;
  const char* name;
};

// The variant measured fastest on the H200 (docs/PERFORMANCE.md).
constexpr AttnChoice kHopperDefault{AttnKernel::ws_sm90, attn::AttnWsVariant::stages2_pingpong,
                                    "ws-s2"};

// The mma.sync kernel: any sm_80+ GPU, and fp16 K/V everywhere.
constexpr AttnChoice kSm80{AttnKernel::mma_sm80, attn::AttnWsVariant::stages2_pingpong, "sm80"};

constexpr AttnChoice kChoices[] = {
    {AttnKernel::ws_sm90, attn::AttnWsVariant::stages2_pingpong, "ws-s2"},
    {AttnKernel::ws_sm90, attn::AttnWsVariant::stages3_pingpong, "ws-s3"},
    {AttnKernel::ws_sm90, attn::AttnWsVariant::stages2, "ws-s2-nopp"},
    {AttnKernel::ws_sm90, attn::AttnWsVariant::stages3, "ws-s3-nopp"},
    {AttnKernel::wgmma_sm90, attn::AttnWsVariant::stages2_pingpong, "wgmma"},
    kSm80,
};

AttnChoice choose() {
  const bool sm90 = arch::hopper_kernels();
  const char* legacy = std::getenv("H3S_ATTN_SM80");
  const char* env = std::getenv("H3S_ATTN_KERNEL");
  std::string_view want = env != nullptr ? env : "";
  if (want.empty() && legacy != nullptr && legacy[0] == '1') want = "sm80";
  if (want.empty() || want == "ws") return sm90 ? kHopperDefault : kSm80;
  std::string names;
  for (const AttnChoice& c : kChoices) {
    if (want == c.name) {
      if (c.kernel != AttnKernel::mma_sm80 && !sm90)
        fail(ErrorKind::invalid_argument,
             "H3S_ATTN_KERNEL={}: that kernel needs an sm_90 GPU (Hopper); use sm80 here", want);
      return c;
    }
    names += names.empty() ? c.name : std::string(", ") + c.name;
  }
  fail(ErrorKind::invalid_argument, "H3S_ATTN_KERNEL={} is not a kernel; choose one of ws, {}",
       want, names);
}

// Re-read per call (a getenv and a few compares): benchmarks switch kernels
// between measurements in one process (h3s bench --attn-kernels); a run that
// does not touch the variable sees one kernel throughout.
AttnChoice choice() {
  return choose();
}

}  // namespace

const char* attention_kernel_name() {
  return choice().name;
}

void attention_fwd(const attn::FwdParams& p, const attn::FwdEnds& ends, cudaStream_t s) {
  const char* op = "attention_fwd";
  if (p.key_begin < 0 || p.key_end < p.key_begin)
    fail(ErrorKind::internal, "{}: keys [{}, {}) are not a range", op, p.key_begin, p.key_end);
  if (p.key_begin % attn::kEngineKvTile != 0)
    fail(ErrorKind::internal,
         "{}: a K/V block must start on a {}-key tile boundary (got {}); align kv_block", op,
         attn::kEngineKvTile, p.key_begin);
  if (p.rows <= 0 || p.heads <= 0) return;
  if (p.heads > 65535)
    fail(ErrorKind::invalid_argument, "{}: {} heads exceed grid.y (65535)", op, p.heads);
  // cp.async and TMA move 16-byte chunks: 8 bf16 of one row of one head.
  constexpr int64_t kVec = 8;
  if (!aligned_to(p.q, 16) || !aligned_to(p.k, 16) || !aligned_to(p.v, 16) || p.ldq % kVec ||
      p.kv_seq_stride % kVec || p.kv_head_stride % kVec)
    fail(ErrorKind::invalid_argument,
         "{}: q/k/v must be 16-byte aligned with strides a multiple of 8 elements (ldq {}, "
         "kv_seq_stride {}, kv_head_stride {})",
         op, p.ldq, p.kv_seq_stride, p.kv_head_stride);
  if (!aligned_to(p.acc, 16)) fail(ErrorKind::internal, "{}: acc must be 16-byte aligned", op);
  const AttnChoice c = p.kv_type == attn::KvType::f16 ? kSm80 : choice();
  // The fused finish stores bf16 pairs (4 bytes); other outputs take the
  // separate finish, whose bits are the same.
  const bool fused_out = ends.out != nullptr && aligned_to(ends.out, 4) && ends.ldo % 2 == 0;
  if (c.kernel == AttnKernel::ws_sm90 && p.key_end > p.key_begin) {
    attn::FwdEnds fused = ends;
    if (!fused_out) fused.out = nullptr;
    attn::attention_fwd_ws_sm90(p, fused, c.variant, s);
    if (ends.out != nullptr && !fused_out)
      attention_finish(p.l, p.acc, ends.out, ends.ldo, p.rows, p.heads, s);
    return;
  }
  if (ends.fresh) attention_reset(p.m, p.l, p.acc, p.rows, p.heads, s);
  if (p.key_end > p.key_begin) {
    if (c.kernel == AttnKernel::mma_sm80)
      attn::attention_fwd_sm80(p, s);
    else
      attn::attention_fwd_sm90(p, s);
  }
  if (ends.out != nullptr) attention_finish(p.l, p.acc, ends.out, ends.ldo, p.rows, p.heads, s);
}

// ---- kvi8r and kvi8s -----------------------------------------------------

namespace {

template <class Variant>
struct Choice {
  Variant variant;
  const char* name;
};

// The variant `env` names, or the first (the one measured fastest on the
// H200, docs/PERFORMANCE.md) when it is unset.
// `also`: a further name the caller handles before asking (kvfp4s' decode).
template <class Variant, size_t kN>
Choice<Variant> choose(const char* env, const Choice<Variant> (&choices)[kN], const char* tier,
                       const char* also = nullptr) {
  const char* set = std::getenv(env);
  const std::string_view want = set != nullptr ? set : "";
  if (want.empty()) return choices[0];
  for (const Choice<Variant>& c : choices)
    if (want == c.name) return c;
  std::string names;
  for (const Choice<Variant>& c : choices)
    names += names.empty() ? c.name : std::string(", ") + c.name;
  if (also != nullptr) names += std::string(", ") + also;
  fail(ErrorKind::invalid_argument, "{}={} is not a {} kernel; choose one of {}", env, want, tier,
       names);
}

constexpr Choice<attn::AttnI8rVariant> kI8rChoices[] = {
    {attn::AttnI8rVariant::dual_direct2, "dual-direct2"},
    {attn::AttnI8rVariant::dual_item8, "dual-item8"},
    {attn::AttnI8rVariant::codes2_item8_b8, "codes2-item8-b8"}};
// kvi8r's decode path (kvi8r_decode, then the exact kernel's fp16
// instance): the default off Hopper, and H3S_KVI8R_KERNEL=decode on Hopper
// for comparison.
constexpr const char* kI8rEnv = "H3S_KVI8R_KERNEL";
constexpr std::string_view kDecode = "decode";
Choice<attn::AttnI8rVariant> i8r_choice() {
  return choose(kI8rEnv, kI8rChoices, "kvi8r", kDecode.data());
}

constexpr Choice<attn::AttnI8sVariant> kI8sChoices[] = {
    // +5.3% over io-pr (H200, 2026-12-05), its own bits: the row sums from the tensor cores.
    {attn::AttnI8sVariant::io_pr_ts, "io-pr-ts"},
    {attn::AttnI8sVariant::io_pr, "io-pr"},  // +1.7% over io, the same bits (H200, 2026-12-05)
    {attn::AttnI8sVariant::io_pr_ts_p8, "io-pr-ts-p8"},
    // io-pr-ts in cluster pairs (K/V multicast), its bits: 0.965x io-pr-ts, no clock gained
    // (H100, 2026-12-06; docs/PERFORMANCE.md "kvi8s"). Kept selectable as that measurement's
    // subject.
    {attn::AttnI8sVariant::io_pr_ts_mc2, "io-pr-ts-mc2"},
    {attn::AttnI8sVariant::io_pr_p8, "io-pr-p8"},
    {attn::AttnI8sVariant::io, "io"},
    {attn::AttnI8sVariant::io2, "io2"},
    {attn::AttnI8sVariant::io_pp, "io-pp"},
    {attn::AttnI8sVariant::io_qr, "io-qr"},
    {attn::AttnI8sVariant::io_p8, "io-p8"},
    {attn::AttnI8sVariant::io_p4, "io-p4"},
    {attn::AttnI8sVariant::io_qr_p4, "io-qr-p4"},
    {attn::AttnI8sVariant::fm4_nopp, "fm4-nopp"},
    {attn::AttnI8sVariant::fm4, "fm4"},
    {attn::AttnI8sVariant::f4, "f4"},
    {attn::AttnI8sVariant::s4, "s4"},
    {attn::AttnI8sVariant::s4_nopp, "s4-nopp"}};
// kvi8s on mma.sync (attn_fwd_i8s_sm89.cu): the kernel off Hopper, on sm_89
// and newer (int8 and fp8 mma.sync), and H3S_KVI8S_KERNEL=mma on Hopper for
// comparison.
constexpr const char* kI8sEnv = "H3S_KVI8S_KERNEL";
constexpr std::string_view kMma = "mma";
constexpr int kMmaComputeCapability = 89;  // fp8 mma.sync
Choice<attn::AttnI8sVariant> i8s_choice() {
  return choose(kI8sEnv, kI8sChoices, "kvi8s", kMma.data());
}

constexpr Choice<attn::AttnFp4sVariant> kFp4sChoices[] = {
    {attn::AttnFp4sVariant::dual_batch2, "dual-batch2"},
    {attn::AttnFp4sVariant::dual_batch4, "dual-batch4"},
    {attn::AttnFp4sVariant::codes2_batch4, "codes2-batch4"},
    {attn::AttnFp4sVariant::codes2_batch2, "codes2-batch2"}};
// kvfp4s' decode path (kvfp4s_decode, then the exact kernel) is its default
// on every GPU: on the H200 at 217,088 tokens it took 1.03x the exact
// kernel's time against the Hopper kernel's 1.34x, with the same bits
// (docs/PERFORMANCE.md "kvfp4s"). H3S_KVFP4S_KERNEL names a Hopper
// variant for comparison.
constexpr const char* kFp4sEnv = "H3S_KVFP4S_KERNEL";
Choice<attn::AttnFp4sVariant> fp4s_choice() {
  return choose(kFp4sEnv, kFp4sChoices, "kvfp4s", kDecode.data());
}

// Whether a tier with a Hopper kernel and a decode path runs the decode
// path: `env` set to "decode"; a Hopper variant named there runs that
// variant (refused off Hopper, and `check` refuses a name that is no
// variant); unset, the decode path off Hopper, and on Hopper when
// `decode_on_hopper` (the faster there).
// The same question for any such second path (`other`: "decode", or kvi8s'
// "mma"), described in errors as `what`.
template <class Check>
bool tier_takes_other_path(const char* env, const char* tier, bool hopper_kernel,
                           bool other_on_hopper, Check check, std::string_view other,
                           const char* what) {
  const char* set = std::getenv(env);
  const std::string_view want = set != nullptr ? set : "";
  if (want == other) return true;
  if (!want.empty() && !hopper_kernel)
    fail(ErrorKind::invalid_argument,
         "{}={}: that {} kernel needs an sm_90 GPU (Hopper); set {} or unset it ({})", env, want,
         tier, other, what);
  if (!want.empty()) {
    check();
    return false;
  }
  return !hopper_kernel || other_on_hopper;
}
template <class Check>
bool tier_decodes(const char* env, const char* tier, bool hopper_kernel, bool decode_on_hopper,
                  Check check) {
  return tier_takes_other_path(env, tier, hopper_kernel, decode_on_hopper, check, kDecode,
                               "the decode path");
}

// Keys on the engine's tile, and the heads a grid can hold.
template <class P>
bool expect_keys_and_heads(const P& p, const char* op) {
  if (p.key_begin < 0 || p.key_end < p.key_begin || p.key_begin % attn::kEngineKvTile != 0)
    fail(ErrorKind::internal, "{}: keys [{}, {}) must start on a {}-key tile", op, p.key_begin,
         p.key_end, attn::kEngineKvTile);
  if (p.rows <= 0 || p.heads <= 0) return false;
  if (p.heads > 65535)
    fail(ErrorKind::invalid_argument, "{}: {} heads exceed grid.y (65535)", op, p.heads);
  return true;
}

}  // namespace

bool attention_kvi8r_supported() {
  return arch::hopper_kernels();
}

bool attention_kvi8r_decodes() {
  // On Hopper its own kernel: 1.11x the exact kernel's time against the
  // decode path's 1.91x (the mma.sync kernel; H200, 2026-12-05).
  return tier_decodes(kI8rEnv, "kvi8r", attention_kvi8r_supported(), false, [] { i8r_choice(); });
}

const char* attention_kvi8r_kernel_name() {
  return attention_kvi8r_decodes() ? kDecode.data() : i8r_choice().name;
}

void attention_kvi8r(const attn::KvI8rFwdParams& p, bool fresh, cudaStream_t s) {
  const char* op = "attention_kvi8r";
  if (!attention_kvi8r_supported())
    fail(ErrorKind::invalid_argument,
         "{}: the kvi8r kernel needs an sm_90 GPU (Hopper); use kv_store 'bf16' here", op);
  if (!expect_keys_and_heads(p, op)) return;
  if (!aligned_to(p.q, 16) || p.ldq % 8 != 0 || !aligned_to(p.k_code, 16) ||
      !aligned_to(p.v_code, 16) || p.code_stride % 16 != 0)
    fail(ErrorKind::invalid_argument,
         "{}: TMA needs q and the codes 16-byte aligned, ldq a multiple of 8 and the code row "
         "stride of 16 (ldq {}, code stride {})",
         op, p.ldq, p.code_stride);
  if (p.key_end == p.key_begin) {
    if (fresh) attention_reset(p.m, p.l, p.acc, p.rows, p.heads, s);
    return;
  }
  attn::attention_fwd_kvi8r_sm90(p, fresh, i8r_choice().variant, s);
}

bool attention_kvi8s_supported() {
  // The Hopper kernel (wgmma and TMA), or the mma.sync one (fp8 mma.sync).
  return arch::hopper_kernels() || arch::device_compute_capability() >= kMmaComputeCapability;
}

namespace {
// Whether kvi8s runs on the mma.sync kernel here (see kMma).
bool attention_kvi8s_on_mma() {
  return tier_takes_other_path(
      kI8sEnv, "kvi8s", arch::hopper_kernels(), false, [] { i8s_choice(); }, kMma,
      "the mma.sync kernel");
}
}  // namespace

const char* attention_kvi8s_kernel_name() {
  return attention_kvi8s_on_mma() ? kMma.data() : i8s_choice().name;
}

void attention_kvi8s(const attn::KvI8sFwdParams& p, cudaStream_t s) {
  const char* op = "attention_kvi8s";
  if (!attention_kvi8s_supported())
    fail(ErrorKind::invalid_argument,
         "{}: the kvi8s kernels need fp8 tensor cores (compute capability 8.9 or newer: RTX "
         "40-series, L4, L40, Hopper, Blackwell); this GPU is {}.{}: use kv_store 'bf16' here",
         op, arch::device_compute_capability() / 10, arch::device_compute_capability() % 10);
  if (!expect_keys_and_heads(p, op) || p.key_end == p.key_begin) return;
  // TMA (Hopper) and cp.async (mma.sync) copy 16-byte chunks.
  if (!aligned_to(p.q, 16) || p.ldq % 8 != 0 || !aligned_to(p.k_code, 16) ||
      !aligned_to(p.v_code, 16) || !aligned_to(p.header, 16) || p.code_stride % 16 != 0 ||
      p.v_stride % 16 != 0)
    fail(ErrorKind::invalid_argument,
         "{}: the kernels need q, the codes and the headers 16-byte aligned, ldq a multiple of 8 "
         "and row strides of 16 bytes (ldq {}, K code stride {}, V code stride {})",
         op, p.ldq, p.code_stride, p.v_stride);
  if (attention_kvi8s_on_mma())
    attn::attention_fwd_kvi8s_sm89(p, s);
  else
    attn::attention_fwd_kvi8s_sm90(p, i8s_choice().variant, s);
}

bool attention_kvfp4s_supported() {
  return attention_kvi8r_supported();  // the same Hopper features: wgmma and TMA
}

bool attention_kvfp4s_decodes() {
  return tier_decodes(kFp4sEnv, "kvfp4s", attention_kvfp4s_supported(), true,
                      [] { fp4s_choice(); });
}

const char* attention_kvfp4s_kernel_name() {
  return attention_kvfp4s_decodes() ? kDecode.data() : fp4s_choice().name;
}

void attention_kvfp4s(const attn::KvFp4sFwdParams& p, cudaStream_t s) {
  const char* op = "attention_kvfp4s";
  if (!attention_kvfp4s_supported())
    fail(ErrorKind::invalid_argument,
         "{}: the kvfp4s kernel needs an sm_90 GPU (Hopper); use kv_store 'bf16' here", op);
  if (!expect_keys_and_heads(p, op) || p.key_end == p.key_begin) return;
  if (!aligned_to(p.q, 16) || p.ldq % 8 != 0 || !aligned_to(p.k_code, 16) ||
      !aligned_to(p.v_code, 16) || p.code_stride % 16 != 0 || !aligned_to(p.k_scale, 8) ||
      !aligned_to(p.v_scale, 8) || p.scale_stride % 8 != 0 || !aligned_to(p.k_mean, 4) ||
      p.mean_stride % 2 != 0)
    fail(ErrorKind::invalid_argument,
         "{}: TMA needs q and the codes 16-byte aligned, ldq a multiple of 8 and a code row "
         "stride of 16 bytes; the scales 8-byte rows, the means 4-byte pairs (ldq {}, code "
         "stride {}, scale stride {}, mean stride {})",
         op, p.ldq, p.code_stride, p.scale_stride, p.mean_stride);
  attn::attention_fwd_kvfp4s_sm90(p, fp4s_choice().variant, s);
}

}  // namespace h3s::cuda
