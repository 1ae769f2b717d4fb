// The attention entry points: the checks every kernel relies on, then the
// kernel kernel_choice.hpp names for this device and the caller's request
// (ExecOptions::attn_kernel). One choice per device and request, never per
// call shape, so every call (stock, streamed, any chunk) runs the same
// arithmetic. fp16 K/V (kvi8r's decode path) always take the mma.sync
// kernel's fp16 instance: the only one.
#include <cstdint>

#include "backend/cuda/arch/device_arch.hpp"
#include "backend/cuda/attention/attn_params.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernel_choice.hpp"
#include "backend/cuda/kernels.hpp"
#include "core/error.hpp"

namespace h3s::cuda {

Kernel attention_choice(Op op, AttnKernel want) {
  const Arch arch = kernel_arch();
  check_request(want, arch);
  return choose(op, arch, want);
}

void attention_fwd(const attn::FwdParams& p, const attn::FwdEnds& ends, AttnKernel want,
                   cudaStream_t s) {
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
  const Kernel k =
      p.kv_type == attn::KvType::f16 ? Kernel::attn_sm80 : attention_choice(Op::attention, want);
  // The fused finish stores bf16 pairs (4 bytes); other outputs take the
  // separate finish, whose bits are the same.
  const bool fused_out = ends.out != nullptr && aligned_to(ends.out, 4) && ends.ldo % 2 == 0;
  if (k == Kernel::attn_ws && p.key_end > p.key_begin) {
    attn::FwdEnds fused = ends;
    if (!fused_out) fused.out = nullptr;
    attn::attention_fwd_ws_sm90(p, fused, s);
    if (ends.out != nullptr && !fused_out)
      attention_finish(p.l, p.acc, ends.out, ends.ldo, p.rows, p.heads, s);
    return;
  }
  // The mma.sync kernel indexes keys and the key stride in 32 bits (2^31 keys
  // of H3's K alone would be 30 TB).
  if (p.key_end > INT32_MAX || p.kv_seq_stride > UINT32_MAX)
    fail(ErrorKind::internal,
         "{}: key end {} or key stride {} elements past the mma.sync kernel's 32-bit key "
         "indexing (2^31 - 1 keys, a stride below 2^32)",
         op, p.key_end, p.kv_seq_stride);
  if (ends.fresh) attention_reset(p.m, p.l, p.acc, p.rows, p.heads, s);
  if (p.key_end > p.key_begin) attn::attention_fwd_sm80(p, s, attn_sm80_slabs_forced(want));
  if (ends.out != nullptr) attention_finish(p.l, p.acc, ends.out, ends.ldo, p.rows, p.heads, s);
}

namespace {

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

// The Hopper kernels launch only where the sm_90a image runs.
void expect_hopper(const char* op, const char* tier) {
  if (!arch::hopper_kernels())
    fail(ErrorKind::invalid_argument,
         "{}: the {} Hopper kernel needs an sm_90 GPU (Hopper) running the sm_90a image; its "
         "decode path runs here",
         op, tier);
}

}  // namespace

void attention_kvi8r(const attn::KvI8rFwdParams& p, bool fresh, cudaStream_t s) {
  const char* op = "attention_kvi8r";
  expect_hopper(op, "kvi8r");
  if (!expect_keys_and_heads(p, op)) return;
  if (!aligned_to(p.q, 16) || p.ldq % 8 != 0 || !aligned_to(p.k_code, 16) ||
      !aligned_to(p.v_code, 16) || p.code_stride % 16 != 0)
    fail(ErrorKind::invalid_argument,
         "{}: needs q 16-byte aligned with ldq a multiple of 8 (q's TMA load) and the codes "
         "16-byte aligned with a row stride a multiple of 16 (ldq {}, code stride {})",
         op, p.ldq, p.code_stride);
  if (p.key_end == p.key_begin) {
    if (fresh) attention_reset(p.m, p.l, p.acc, p.rows, p.heads, s);
    return;
  }
  attn::attention_fwd_kvi8r_sm90(p, fresh, s);
}

void attention_kvi8s(const attn::KvI8sFwdParams& p, Kernel k, cudaStream_t s) {
  const char* op = "attention_kvi8s";
  if (k != Kernel::kvi8s_sm90 && k != Kernel::kvi8s_sm89)
    fail(ErrorKind::invalid_argument,
         "{}: the kvi8s kernels need fp8 tensor cores (compute capability 8.9 or newer: RTX "
         "40-series, L4, L40, Hopper, Blackwell); this GPU is {}.{}: use kv_store 'bf16' here",
         op, arch::device_compute_capability() / 10, arch::device_compute_capability() % 10);
  if (k == Kernel::kvi8s_sm90) expect_hopper(op, "kvi8s");
  if (!expect_keys_and_heads(p, op) || p.key_end == p.key_begin) return;
  // TMA (Hopper) and cp.async (mma.sync) copy 16-byte chunks.
  if (!aligned_to(p.q, 16) || p.ldq % 8 != 0 || !aligned_to(p.k_code, 16) ||
      !aligned_to(p.v_code, 16) || !aligned_to(p.header, 16) || p.code_stride % 16 != 0 ||
      p.v_stride % 16 != 0)
    fail(ErrorKind::invalid_argument,
         "{}: the kernels need q, the codes and the headers 16-byte aligned, ldq a multiple of 8 "
         "and row strides of 16 bytes (ldq {}, K code stride {}, V code stride {})",
         op, p.ldq, p.code_stride, p.v_stride);
  if (k == Kernel::kvi8s_sm89)
    attn::attention_fwd_kvi8s_sm89(p, s);
  else
    attn::attention_fwd_kvi8s_sm90(p, s);
}

void attention_kvfp4s(const attn::KvFp4sFwdParams& p, cudaStream_t s) {
  const char* op = "attention_kvfp4s";
  expect_hopper(op, "kvfp4s");
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
  attn::attention_fwd_kvfp4s_sm90(p, s);
}

}  // namespace h3s::cuda
