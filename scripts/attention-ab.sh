#!/usr/bin/env bash
# Two builds' exact attention side by side on the GPU machine (repo root), in one call:
# the new build's binaries (.devbin.tgz, scripts/device-build.sh) and the previous
# build's (OLD_TGZ: the same, carried under another name). For a kernel change that must
# keep or knowingly change bits, and must be timed against what it replaces:
#   1. the new build's attention, block and forward GPU tests on both routes (the default
#      kernels and --attn-kernel=sm80), then on the compute_80 PTX (CUDA_FORCE_PTX_JIT=1:
#      what RTX cards run), no test skipped;
#   2. bits: scripts/compare-bits.sh old against new, on the sm_90a image and on the PTX
#      (EXPECT_BITS=same fails on a difference; EXPECT_BITS=changed only reports them);
#   3. attention alone at TOKENS (default 32768,217088,300001) for both builds: on the
#      sm_90a image the default kernel and the mma.sync kernel (--attn-kernels; and its
#      one-slab tile, sm80-1slab, in a build that has it), on the
#      PTX the mma.sync kernel in a process of its own;
#   4. the int8 block at 217,088 tokens for both builds, and the PyTorch anchor (flash:
#      what ComfyUI runs; cuDNN) with its attention alone, in the same call.
# PARTS (default tests,bits,speed) picks what runs: all three pass a device call's 10
# minutes at the three token counts, so split them over calls on one warm machine
# (e.g. PARTS=tests,bits, then PARTS=speed). JSON and logs under $OUT; exits non-zero when
# a step failed (named at the end).
#   usage: bash scripts/attention-ab.sh OLD_TGZ   (e.g. .devbin-old.tgz: git-ignored, carried)
#   env:   NEW_TGZ (default .devbin.tgz: a branch's build, carried from .ab/), TOKENS,
#          EXPECT_BITS (same|changed, default same), AB_FORMATS (int8,bf16),
#          AB_TIERS (bf16,kvi8r: the exact store and kvi8r's decode path, which attends
#          with the mma.sync kernel's fp16 instance), TORCH_ANCHOR=0 skips PyTorch.
set -uo pipefail
old_tgz=${1:?usage: attention-ab.sh OLD_TGZ, the previous build as a .devbin.tgz}
tokens=${TOKENS:-32768,217088,300001}
OUT=${OUT:-/tmp/h3s-out}
mkdir -p "$OUT"
export H3S_REQUIRE_GPU=1
new=.devbin old=.devbin-old
rm -rf $new $old && mkdir -p $new $old
tar -xzf "${NEW_TGZ:-.devbin.tgz}" -C $new && tar -xzf "$old_tgz" -C $old || { echo "attention-ab: cannot unpack"; exit 2; }
parts=${PARTS:-tests,bits,speed}
want() { [[ ",$parts," == *",$1,"* ]]; }
failed=() last_rc=0
# step, no_skips
source "$(dirname "$0")/device-steps.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$OUT/gpu.txt" &&
  cat "$OUT/gpu.txt" || failed+=("nvidia-smi")
if want tests; then
  filter='GpuAttention.*:GpuOps.Attention*:*GpuBlock*:GpuForward.*:*GpuKvStore.*/kvi8r:GpuKvi8r*'
  step tests_default 300 $new/h3s_tests_gpu --gtest_filter="$filter" --gtest_output=json:"$OUT/tests_default.json"
  step tests_sm80 300 $new/h3s_tests_gpu --attn-kernel=sm80 --gtest_filter="$filter" \
    --gtest_output=json:"$OUT/tests_sm80.json"
  step tests_ptx80 400 env CUDA_FORCE_PTX_JIT=1 $new/h3s_tests_gpu \
    --gtest_filter='GpuArch.TheLoadedImage*:GpuAttention.*:GpuOps.Attention*:*GpuBlockExact.StreamedEqualsStock*:GpuForward.*:GpuKvi8rDecode.*' \
    --gtest_output=json:"$OUT/tests_ptx80.json"
  for j in tests_default tests_sm80 tests_ptx80; do
    [ -f "$OUT/$j.json" ] && no_skips "$j" "$OUT/$j.json"
  done
fi
bits() {  # bits NAME [env...]: compare-bits old vs new, failing only when bits must match
  local name=$1
  shift
  step "$name" 500 env "$@" OUT="$OUT" bash scripts/compare-bits.sh $old/h3s $new/h3s \
    "${AB_FORMATS:-int8,bf16}" "${AB_TIERS:-bf16,kvi8r}"
  if [ "${EXPECT_BITS:-same}" = changed ] && [ "$last_rc" -eq 1 ]; then
    unset 'failed[${#failed[@]}-1]'
    echo "$name: bits differ, as EXPECT_BITS=changed says" | tee -a "$OUT/steps.txt"
  fi
}
if want bits; then
  bits bits_sm90a H3S_AB=1
  bits bits_ptx80 CUDA_FORCE_PTX_JIT=1
fi
want speed && for b in new old; do
  dir=$([ $b = new ] && echo $new || echo $old)
  # sm80-1slab (a build that has it): the one-slab tile A100 and RTX cards run
  kernels=default,sm80
  $dir/h3s bench --help 2>/dev/null | grep -q sm80-1slab && kernels+=,sm80-1slab
  step "attention_${b}" 400 $dir/h3s bench --backend cuda --preset h3 --format int8 \
    --token-list "$tokens" --json --only-attention --attn-kernels "$kernels"
  step "attention_ptx80_${b}" 400 env CUDA_FORCE_PTX_JIT=1 $dir/h3s bench --backend cuda \
    --preset h3 --format int8 --token-list "$tokens" --json --only-attention
  step "block_int8_${b}" 300 $dir/h3s bench --backend cuda --preset h3 --format int8 \
    --token-list 217088 --json --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384 --skip-attention
done
if want speed && [ "${TORCH_ANCHOR-1}" != 0 ]; then
  for a in FLASH_ATTENTION CUDNN_ATTENTION; do
    step "torch_${a%%_*}" 300 env ATTN=$a OUT="$OUT/torch_${a%%_*}" python3 .ext/torch_h3_block.py 217088
  done
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "attention-ab: FAILED steps: ${failed[*]}"
  exit 1
fi
echo "attention-ab: every step passed"
