// backend/cuda/kernel_choice.hpp, the one table of which kernel runs where,
// checked without a GPU: every (op, architecture) has one row; the defaults
// are the kernels the GPU sessions measured (the next GPU run compares the
// default paths' output bits with the binaries before the table); each
// request (ExecOptions::attn_kernel / gemm_kernel) maps to the row's kernel
// or its one fallback; the decode blocks are the planner's figures.
#include <gtest/gtest.h>

#include <initializer_list>

#include "backend/cuda/kernel_choice.hpp"
#include "core/error.hpp"

namespace h3s::cuda {
namespace {

constexpr Op kOps[] = {Op::attention, Op::kvi8r,   Op::kvi8s,    Op::kvfp4s,
                       Op::gemm_bf16, Op::gemm_i8, Op::gemm_w4a8};
constexpr Arch kArchs[] = {Arch::sm90, Arch::sm89, Arch::sm80};

TEST(KernelChoice, EveryOpAndArchitectureHasOneRowWithItsMeasurement) {
  for (const Op op : kOps)
    for (const Arch arch : kArchs) {
      int rows = 0;
      for (const KernelRow& r : kKernelTable)
        if (r.op == op && r.arch == arch) {
          ++rows;
          EXPECT_FALSE(r.measured.empty());
          if (r.kernel != Kernel::none) {
            EXPECT_NE(r.kernel, r.fallback) << "a fallback is another kernel";
          }
        }
      EXPECT_EQ(rows, 1) << "op " << int(op) << ", arch " << int(arch);
    }
  EXPECT_EQ(std::size(kKernelTable), std::size(kOps) * std::size(kArchs));
}

// The production paths, as measured (docs/PERFORMANCE.md): what automatic runs.
TEST(KernelChoice, TheDefaultsAreTheMeasuredKernels) {
  constexpr AttnKernel a = AttnKernel::automatic;
  EXPECT_EQ(choose(Op::attention, Arch::sm90, a), Kernel::attn_ws);
  EXPECT_EQ(choose(Op::kvi8r, Arch::sm90, a), Kernel::kvi8r_sm90);
  EXPECT_EQ(choose(Op::kvi8s, Arch::sm90, a), Kernel::kvi8s_sm90);
  EXPECT_EQ(choose(Op::kvfp4s, Arch::sm90, a), Kernel::kvfp4s_decode);
  for (const Arch off : {Arch::sm89, Arch::sm80}) {
    EXPECT_EQ(choose(Op::attention, off, a), Kernel::attn_sm80);
    EXPECT_EQ(choose(Op::kvi8r, off, a), Kernel::kvi8r_decode);
    EXPECT_EQ(choose(Op::kvfp4s, off, a), Kernel::kvfp4s_decode);
    EXPECT_EQ(choose(Op::gemm_bf16, off, GemmKernel::automatic), Kernel::gemm_bf16_sm80);
    EXPECT_EQ(choose(Op::gemm_i8, off, GemmKernel::automatic), Kernel::gemm_i8_sm80);
  }
  EXPECT_EQ(choose(Op::kvi8s, Arch::sm89, a), Kernel::kvi8s_sm89);
  EXPECT_EQ(choose(Op::kvi8s, Arch::sm80, a), Kernel::none) << "no fp8 mma.sync: the exact store";
  EXPECT_EQ(choose(Op::gemm_bf16, Arch::sm90, GemmKernel::automatic), Kernel::gemm_bf16_sm90);
  EXPECT_EQ(choose(Op::gemm_i8, Arch::sm90, GemmKernel::automatic), Kernel::gemm_i8_sm90);
  // The names the result files under bench/results use.
  EXPECT_EQ(kernel_name(Kernel::attn_ws), "ws-s2");
  EXPECT_EQ(kernel_name(Kernel::kvi8r_sm90), "dual-direct2");
  EXPECT_EQ(kernel_name(Kernel::kvi8s_sm90), "io-pr-ts");
  EXPECT_EQ(kernel_name(Kernel::kvi8s_sm89), "mma");
  EXPECT_EQ(kernel_name(Kernel::kvfp4s_sm90), "dual-batch2");
  EXPECT_EQ(kernel_name(Kernel::gemm_i8_sm90), "n256s4p2w1");
}

// sm80 on Hopper: the route other GPUs take; sm90: each tier's Hopper kernel.
TEST(KernelChoice, RequestsPickTheRouteOnHopper) {
  EXPECT_EQ(choose(Op::attention, Arch::sm90, AttnKernel::sm80), Kernel::attn_sm80);
  EXPECT_EQ(choose(Op::kvi8r, Arch::sm90, AttnKernel::sm80), Kernel::kvi8r_decode);
  EXPECT_EQ(choose(Op::kvi8s, Arch::sm90, AttnKernel::sm80), Kernel::kvi8s_sm89);
  EXPECT_EQ(choose(Op::kvfp4s, Arch::sm90, AttnKernel::sm80), Kernel::kvfp4s_decode);
  EXPECT_EQ(choose(Op::attention, Arch::sm90, AttnKernel::sm90), Kernel::attn_ws);
  EXPECT_EQ(choose(Op::kvi8r, Arch::sm90, AttnKernel::sm90), Kernel::kvi8r_sm90);
  EXPECT_EQ(choose(Op::kvi8s, Arch::sm90, AttnKernel::sm90), Kernel::kvi8s_sm90);
  EXPECT_EQ(choose(Op::kvfp4s, Arch::sm90, AttnKernel::sm90), Kernel::kvfp4s_sm90);
  EXPECT_EQ(choose(Op::gemm_bf16, Arch::sm90, GemmKernel::sm80), Kernel::gemm_bf16_sm80);
  EXPECT_EQ(choose(Op::gemm_i8, Arch::sm90, GemmKernel::sm80), Kernel::gemm_i8_sm80);
  // Off Hopper sm80 is what runs anyway, and sm90 is refused before any op.
  for (const Op op : {Op::attention, Op::kvi8r, Op::kvi8s, Op::kvfp4s})
    EXPECT_EQ(choose(op, Arch::sm89, AttnKernel::sm80),
              choose(op, Arch::sm89, AttnKernel::automatic));
  EXPECT_TRUE(request_runs(AttnKernel::sm90, Arch::sm90));
  for (const Arch off : {Arch::sm89, Arch::sm80}) {
    EXPECT_TRUE(request_runs(AttnKernel::sm80, off));
    EXPECT_FALSE(request_runs(AttnKernel::sm90, off));
  }
}

// Three stages where a block may take their shared memory, two otherwise and
// on the sm80 route; neither fitting is for the caller to refuse.
TEST(KernelChoice, W4a8PipelineFollowsSharedMemory) {
  constexpr int k3 = 112 * 1024, k2 = 86 * 1024;
  EXPECT_EQ(choose_w4a8(GemmKernel::automatic, 227 * 1024, k3, k2), Kernel::gemm_w4a8_s3);
  EXPECT_EQ(choose_w4a8(GemmKernel::automatic, 163 * 1024, k3, k2), Kernel::gemm_w4a8_s3);
  EXPECT_EQ(choose_w4a8(GemmKernel::automatic, 99 * 1024, k3, k2), Kernel::gemm_w4a8_s2);
  EXPECT_EQ(choose_w4a8(GemmKernel::sm80, 227 * 1024, k3, k2), Kernel::gemm_w4a8_s2);
  EXPECT_EQ(choose_w4a8(GemmKernel::automatic, 64 * 1024, k3, k2), Kernel::none);
}

// The planner's figures (backend/attn_tile.hpp): kvfp4s 16,384 keys on
// Hopper's own route, 4096 elsewhere; kvi8r 4096; no scratch for the rest.
// The mma.sync attention's tile by an SM's shared memory (a CTA: 97 KiB,
// attention/attn_fwd_traits.cuh, plus the driver's 1 KiB a block): two slabs
// where two CTAs fit (H100/H200: 228 KiB), one where one does (A100: 164 KiB;
// RTX 30/40/50: 100 KiB), which keeps 8 warps an SM there.
TEST(KernelChoice, AttentionSm80SlabsFollowSharedMemoryPerSm) {
  constexpr int cta = 97 * 1024;
  EXPECT_EQ(attn_sm80_slabs(228 * 1024, cta), 2);
  EXPECT_EQ(attn_sm80_slabs(164 * 1024, cta), 1);
  EXPECT_EQ(attn_sm80_slabs(100 * 1024, cta), 1);
  EXPECT_EQ(attn_sm80_slabs(2 * (cta + 1024), cta), 2);
  EXPECT_EQ(attn_sm80_slabs(2 * (cta + 1024) - 1, cta), 1);
}

// sm80-1slab is the sm80 route with the one-slab tile forced (what A100 and RTX
// cards run, timed on Hopper): the same kernel and decode blocks as sm80 for
// every op and architecture; only it forces a tile.
TEST(KernelChoice, TheOneSlabRequestIsTheSm80RouteWithItsTile) {
  for (const Op op : kOps)
    for (const Arch arch : kArchs) {
      const Kernel k = choose(op, arch, AttnKernel::sm80_one_slab);
      EXPECT_EQ(k, choose(op, arch, AttnKernel::sm80)) << int(op) << " " << int(arch);
      EXPECT_EQ(decode_keys(k, arch, AttnKernel::sm80_one_slab),
                decode_keys(k, arch, AttnKernel::sm80));
    }
  EXPECT_TRUE(request_runs(AttnKernel::sm80_one_slab, Arch::sm80));
  EXPECT_EQ(attn_sm80_slabs_forced(AttnKernel::sm80_one_slab), 1);
  for (const AttnKernel k : {AttnKernel::automatic, AttnKernel::sm80, AttnKernel::sm90})
    EXPECT_EQ(attn_sm80_slabs_forced(k), 0);
}

TEST(KernelChoice, DecodeBlocks) {
  EXPECT_EQ(decode_keys(Kernel::kvfp4s_decode, Arch::sm90, AttnKernel::automatic),
            kKvDecodeKeysHopper);
  EXPECT_EQ(decode_keys(Kernel::kvfp4s_decode, Arch::sm90, AttnKernel::sm80), kKvDecodeKeys);
  EXPECT_EQ(decode_keys(Kernel::kvfp4s_decode, Arch::sm80, AttnKernel::automatic), kKvDecodeKeys);
  EXPECT_EQ(decode_keys(Kernel::kvi8r_decode, Arch::sm90, AttnKernel::sm80), kKvDecodeKeys);
  EXPECT_EQ(decode_keys(Kernel::kvi8r_sm90, Arch::sm90, AttnKernel::automatic), 0);
  EXPECT_EQ(decode_keys(Kernel::kvfp4s_sm90, Arch::sm90, AttnKernel::sm90), 0);
}

TEST(KernelChoice, OptionNamesRoundTrip) {
  for (const AttnKernel k :
       {AttnKernel::automatic, AttnKernel::sm80, AttnKernel::sm90, AttnKernel::sm80_one_slab})
    EXPECT_EQ(parse_attn_kernel(attn_kernel_name(k)), k);
  for (const GemmKernel k : {GemmKernel::automatic, GemmKernel::sm80})
    EXPECT_EQ(parse_gemm_kernel(gemm_kernel_name(k)), k);
  EXPECT_THROW(parse_attn_kernel("ws-s3"), Error);
  EXPECT_THROW(parse_gemm_kernel("s3p2"), Error);
  ExecOptions o;
  o.attn_kernel = AttnKernel(7);
  EXPECT_THROW(o.validate(), Error);
}

}  // namespace
}  // namespace h3s::cuda
