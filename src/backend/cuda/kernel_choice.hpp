// Which kernel runs, per tier and architecture: the one place that decides
// (FlashAttention-3's hopper/tile_size.h is the model). Each row says what a
// (tier, architecture) runs, its fallback (the one other kernel kept for it:
// what a comparison run selects through ExecOptions::attn_kernel /
// gemm_kernel, or what runs where the kernel cannot) and the measurement that
// chose it (docs/PERFORMANCE.md has the rest, and the variants that lost,
// each with its figure; their code is in
// bench/results/experiments/removed_*_variants.diff).
//
// The dispatchers (attention/attn_dispatch.cpp, cuda_kv_tiers.cpp, gemm/)
// call choose() per call with the device's architecture (kernel_arch()) and
// the caller's request; nothing reads the environment. Plain C++ without
// CUDA headers, so the CPU tests check the table (tests/ops).
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/attn_tile.hpp"
#include "h3s/options.hpp"

namespace h3s::cuda {

// What a device runs of this build's images (arch/device_arch.hpp).
enum class Arch : uint8_t {
  sm90,  // Hopper on its sm_90a image (H100, H200): wgmma, TMA
  sm89,  // fp8 mma.sync, compute capability 8.9+ without that image: RTX 40/50, L4, L40,
         // and Hopper made to run the PTX (CUDA_FORCE_PTX_JIT=1)
  sm80,  // every other sm_80+ GPU (RTX 30, A100): the mma.sync kernels
};

// The kernels kept; kernel_name() is what benchmarks record (the names the
// result files under bench/results use).
enum class Kernel : uint8_t {
  none,            // no kernel here: the executor keeps the exact store and says so
  attn_ws,         // attention/attn_fwd_ws_sm90.cu: warp-specialised, 2-stage ring, ping-pong
  attn_sm80,       // attention/attn_fwd_sm80.cu: mma.sync, 64-key tiles (and its fp16
                   // instance, kvi8r's decode path)
  kvi8r_sm90,      // attention/attn_fwd_i8r_sm90.cu: two producer warpgroups, codes from L2
  kvi8r_decode,    // kv/kvi8r_decode.cu: blocks of keys to fp16, then the exact kernel
  kvi8s_sm90,      // attention/attn_fwd_i8s_sm90.cu: the overlap schedule, P from registers,
                   // row sums on the tensor cores
  kvi8s_sm89,      // attention/attn_fwd_i8s_sm89.cu: the same arithmetic on mma.sync
  kvfp4s_sm90,     // attention/attn_fwd_fp4s_sm90.cu: two producer warpgroups decoding
  kvfp4s_decode,   // kv/kvfp4s_decode.cu: blocks of keys to bf16, then the exact kernel
  gemm_bf16_sm90,  // gemm/gemm_bf16_sm90.cu: wgmma, 128 x 128 tiles
  gemm_bf16_sm80,  // gemm/gemm_bf16_sm80.cu: mma.sync, 128 x 128 tiles
  gemm_i8_sm90,    // gemm/gemm_i8_sm90.cu: wgmma, 128 x 256 tiles, 4 stages 2 ahead
  gemm_i8_sm80,    // gemm/gemm_i8_sm80.cu: mma.sync, 128 x 128 tiles
  gemm_w4a8_s3,    // gemm/gemm_w4a8_sm80.cu: three cp.async stages (112 KiB a block)
  gemm_w4a8_s2,    // the same in two (86 KiB): the same bits
};

constexpr std::string_view kernel_name(Kernel k) {
  switch (k) {
    case Kernel::none:
      return "none";
    case Kernel::attn_ws:
      return "ws-s2";
    case Kernel::attn_sm80:
    case Kernel::gemm_bf16_sm80:
    case Kernel::gemm_i8_sm80:
      return "sm80";
    case Kernel::kvi8r_sm90:
      return "dual-direct2";
    case Kernel::kvi8r_decode:
    case Kernel::kvfp4s_decode:
      return "decode";
    case Kernel::kvi8s_sm90:
      return "io-pr-ts";
    case Kernel::kvi8s_sm89:
      return "mma";
    case Kernel::kvfp4s_sm90:
      return "dual-batch2";
    case Kernel::gemm_bf16_sm90:
      return "wgmma";
    case Kernel::gemm_i8_sm90:
      return "n256s4p2w1";
    case Kernel::gemm_w4a8_s3:
      return "s3";
    case Kernel::gemm_w4a8_s2:
      return "s2";
  }
  return "?";
}

// What a request names: a Hopper kernel (sm90) or one of the route every
// other GPU takes (sm80: mma.sync, and the decode paths onto it).
constexpr AttnKernel kernel_route(Kernel k) {
  switch (k) {
    case Kernel::attn_ws:
    case Kernel::kvi8r_sm90:
    case Kernel::kvi8s_sm90:
    case Kernel::kvfp4s_sm90:
    case Kernel::gemm_bf16_sm90:
    case Kernel::gemm_i8_sm90:
    case Kernel::gemm_w4a8_s3:
      return AttnKernel::sm90;
    case Kernel::none:
      return AttnKernel::automatic;
    default:
      return AttnKernel::sm80;
  }
}

// The ops with a choice. The exact attention is `attention`; the decode
// paths attend their blocks with it, so they follow its row.
enum class Op : uint8_t { attention, kvi8r, kvi8s, kvfp4s, gemm_bf16, gemm_i8, gemm_w4a8 };

struct KernelRow {
  Op op;
  Arch arch;
  Kernel kernel;
  Kernel fallback;
  std::string_view measured;  // the figure that chose `kernel`, and its file
};

// Attention figures: 217,088 tokens x 56 heads. Time "vs exact": against
// the exact kernel of the same GPU in the same process (h3s kvbench).
inline constexpr KernelRow kKernelTable[] = {
    {Op::attention, Arch::sm90, Kernel::attn_ws, Kernel::attn_sm80,
     "647.9 TFLOP/s against sm80's 312.4 (H200, bench_h200_ws_attention_2026-12-02_attention"
     ".jsonl)"},
    {Op::attention, Arch::sm89, Kernel::attn_sm80, Kernel::none,
     "the only exact kernel for these GPUs: 5.142 s a block (H200 on the PTX, "
     "bench_int8_bf16_ptx80_217088_2026-12-05.txt)"},
    {Op::attention, Arch::sm80, Kernel::attn_sm80, Kernel::none,
     "the only exact kernel for these GPUs: 5.142 s a block (H200 on the PTX, "
     "bench_int8_bf16_ptx80_217088_2026-12-05.txt)"},
    {Op::kvi8r, Arch::sm90, Kernel::kvi8r_sm90, Kernel::kvi8r_decode,
     "1.089-1.097x exact against the decode path's 1.86-1.91x (H200, "
     "kvbench_kvi8r_dual-direct2_rep{1,2,3}_2026-12-04_1257utc-2.json, "
     "kvbench_kvi8r_2026-12-05.jsonl)"},
    {Op::kvi8r, Arch::sm89, Kernel::kvi8r_decode, Kernel::none,
     "1.01x the exact mma.sync kernel (H200 on the PTX, kvbench_kvi8r_2026-12-05.jsonl)"},
    {Op::kvi8r, Arch::sm80, Kernel::kvi8r_decode, Kernel::none,
     "1.01x the exact mma.sync kernel (H200 on the PTX, kvbench_kvi8r_2026-12-05.jsonl)"},
    {Op::kvi8s, Arch::sm90, Kernel::kvi8s_sm90, Kernel::kvi8s_sm89,
     "778.9 TOPS, 1.02-1.04x SageAttention-2's sm90 kernel (H200, "
     "2026-12-06_h200_kvbench_0319utc.jsonl.txt); the mma.sync kernel 258 (H100, "
     "2026-12-05_h100_mma_summary.txt)"},
    {Op::kvi8s, Arch::sm89, Kernel::kvi8s_sm89, Kernel::none,
     "258 TOPS, 1.16x the exact mma.sync kernel's time, K/V halved (H100 on the PTX, "
     "2026-12-05_h100_mma_summary.txt)"},
    {Op::kvi8s, Arch::sm80, Kernel::none, Kernel::none,
     "no fp8 mma.sync before compute capability 8.9: the exact store"},
    {Op::kvfp4s, Arch::sm90, Kernel::kvfp4s_decode, Kernel::kvfp4s_sm90,
     "decoding 16,384 keys for the exact kernel 0.95x exact, its own kernel 1.34x (H200, "
     "kvbench_kvfp4s_2026-12-05_0513utc.txt, kvbench_kvfp4s_dual-batch2_217088_"
     "2026-12-05.txt)"},
    {Op::kvfp4s, Arch::sm89, Kernel::kvfp4s_decode, Kernel::none,
     "1.00x the exact mma.sync kernel (H200 on the PTX, kvbench_kvfp4s_ptx80_217088_"
     "2026-12-05.txt)"},
    {Op::kvfp4s, Arch::sm80, Kernel::kvfp4s_decode, Kernel::none,
     "1.00x the exact mma.sync kernel (H200 on the PTX, kvbench_kvfp4s_ptx80_217088_"
     "2026-12-05.txt)"},
    {Op::gemm_bf16, Arch::sm90, Kernel::gemm_bf16_sm90, Kernel::gemm_bf16_sm80,
     "the bf16 block at 32,768 tokens 0.108 s against 0.128 s (H200, "
     "bench_h200_wgmma_gemm_bf16_2026-12-02.jsonl)"},
    {Op::gemm_bf16, Arch::sm89, Kernel::gemm_bf16_sm80, Kernel::none, "the only one off Hopper"},
    {Op::gemm_bf16, Arch::sm80, Kernel::gemm_bf16_sm80, Kernel::none, "the only one off Hopper"},
    {Op::gemm_i8, Arch::sm90, Kernel::gemm_i8_sm90, Kernel::gemm_i8_sm80,
     "the int8 block 2.143 s streamed against mma.sync's 2.209 (H200, "
     "block_int8_kvi8s_gemm_i8_kernels_2026-12-03.jsonl)"},
    {Op::gemm_i8, Arch::sm89, Kernel::gemm_i8_sm80, Kernel::none, "the only one off Hopper"},
    {Op::gemm_i8, Arch::sm80, Kernel::gemm_i8_sm80, Kernel::none, "the only one off Hopper"},
    // W4A8's depth follows a block's shared memory, not the architecture
    // (choose_w4a8): three stages where 112 KiB fit (Hopper, A100), two
    // where 99 KiB do (RTX 30/40, L4); the same bits.
    {Op::gemm_w4a8, Arch::sm90, Kernel::gemm_w4a8_s3, Kernel::gemm_w4a8_s2,
     "three stages, the pipeline measured: the w4a8 block 2.689 s at 217,088 tokens (H200, "
     "bench_h200_2026-12-02_bf16_w4a8.jsonl); two where a block has 99 KiB (their "
     "speeds never compared)"},
    {Op::gemm_w4a8, Arch::sm89, Kernel::gemm_w4a8_s3, Kernel::gemm_w4a8_s2,
     "as on sm90, by shared memory"},
    {Op::gemm_w4a8, Arch::sm80, Kernel::gemm_w4a8_s3, Kernel::gemm_w4a8_s2,
     "as on sm90, by shared memory"},
};

constexpr const KernelRow& kernel_row(Op op, Arch arch) {
  for (const KernelRow& r : kKernelTable)
    if (r.op == op && r.arch == arch) return r;
  return kKernelTable[0];  // unreachable: every (op, arch) has a row (tests/ops)
}

// What `op` runs on `arch` for `want`: automatic the row's kernel; sm80 or
// sm90 whichever of the kernel and its fallback is of that route, and
// Kernel::none when neither is (a Hopper kernel asked for off Hopper:
// check_request refuses that first; kvi8s before 8.9: the exact store).
constexpr Kernel choose(Op op, Arch arch, AttnKernel want) {
  if (want == AttnKernel::sm80_one_slab) want = AttnKernel::sm80;  // a tile of the sm80 route
  const KernelRow& r = kernel_row(op, arch);
  if (want == AttnKernel::automatic) return r.kernel;
  if (kernel_route(r.kernel) == want) return r.kernel;
  if (kernel_route(r.fallback) == want) return r.fallback;
  return Kernel::none;
}
constexpr Kernel choose(Op op, Arch arch, GemmKernel want) {
  return choose(op, arch, want == GemmKernel::sm80 ? AttnKernel::sm80 : AttnKernel::automatic);
}

// W4A8's pipeline on a device whose blocks may take `smem_limit` bytes of
// shared memory (the kernel's smem3 / smem2 bytes for three / two stages):
// the deepest that fits, or two for sm80 (what RTX 30/40 cards run); none
// when neither fits.
constexpr Kernel choose_w4a8(GemmKernel want, int smem_limit, int smem3, int smem2) {
  if (want == GemmKernel::automatic && smem_limit >= smem3) return Kernel::gemm_w4a8_s3;
  return smem_limit >= smem2 ? Kernel::gemm_w4a8_s2 : Kernel::none;
}

// The mma.sync attention's tile on a device with `smem_per_sm` bytes of shared
// memory an SM (attention/attn_fwd_traits.cuh; a CTA takes `cta_smem` plus the
// 1 KiB the driver reserves per block): two m16 slabs a warp, 4 warps (each
// K/V fragment read from shared memory feeds two MMAs), where an SM holds two
// CTAs (H100/H200, 228 KiB: 8 warps an SM); one slab, 8 warps, where it holds
// one (A100, 164 KiB; RTX 30/40/50, 100 KiB: two slabs would leave 4 warps an
// SM, one a scheduler, with nothing to issue while its softmax runs). The same
// bits either way.
constexpr int attn_sm80_slabs(int smem_per_sm, int cta_smem) {
  return smem_per_sm >= 2 * (cta_smem + 1024) ? 2 : 1;
}
// The tile a request forces (attn_kernel sm80-1slab: the one other GPUs run,
// timed on Hopper), 0 for attn_sm80_slabs' choice.
constexpr int attn_sm80_slabs_forced(AttnKernel want) {
  return want == AttnKernel::sm80_one_slab ? 1 : 0;
}

// Keys of every head kernel `k` (a decode path) decodes into arena scratch at
// once, for the planner too (Backend::kv_tier_decode_keys); 0 for the other
// kernels. kvfp4s on Hopper 16,384: 0.95x the exact kernel's time against
// 1.02-1.03x at 4096 (H200, kvbench_kvfp4s_decode_217088_2026-12-05.txt);
// 4096 elsewhere, what a 16 GB card can spare, and on the sm80 route (what
// other GPUs run); kvi8r decodes on Hopper only on that route.
constexpr int64_t decode_keys(Kernel k, Arch arch, AttnKernel want) {
  if (k == Kernel::kvfp4s_decode && arch == Arch::sm90 && want != AttnKernel::sm80 &&
      want != AttnKernel::sm80_one_slab)
    return kKvDecodeKeysHopper;
  return k == Kernel::kvfp4s_decode || k == Kernel::kvi8r_decode ? kKvDecodeKeys : 0;
}

// Whether a device of `arch` runs the request: sm90 needs Hopper's sm_90a image.
constexpr bool request_runs(AttnKernel attn, Arch arch) {
  return attn != AttnKernel::sm90 || arch == Arch::sm90;
}

// The architecture of the current device (arch/device_arch.hpp).
Arch kernel_arch();

// Throws Error(invalid_argument) naming the request and the fix unless
// request_runs.
void check_request(AttnKernel attn, Arch arch);

}  // namespace h3s::cuda
