#!/usr/bin/env bash
# Runs ON the GPU machine, from the repo root, over .devbin/ or .devbin.tgz (carry the
# latter: scripts/device-build.sh makes both),
# .whl/ (the CUDA h3stream wheel for the device's Python, `scripts/device-build.sh --wheel`)
# and .ext/torch_h3_block.py (the PyTorch anchor, carried). One call: GPU tests,
# compute-sanitizer, the Python tests on the CUDA wheel, the node pack in a real ComfyUI
# (scripts/comfyui-e2e.sh, carry .ext), block benchmark and the PyTorch reference; JSON and
# logs under $OUT.
#   usage: bash scripts/device-check.sh [tests|bench|placement|attention|tiers|ptx80|decode|mma|wheel|all] [token list] [formats]
# wheel: the release wheel (dist/, scripts/build-wheel.sh; carry dist and .ext) where nothing
# else is: a fresh venv (--system-site-packages for the image's PyTorch only), PATH without
# nvcc or a compiler, LD_LIBRARY_PATH unset; pip install of the wheel (no index),
# build_info(), ldd of the extension, auditwheel show (auditwheel carried as wheels in
# dist/tools/), the CUDA Python tests and the node pack in a real ComfyUI on that venv.
# mma: kvi8s' mma.sync kernel (RTX 40/50-series): tests on Hopper and on its PTX, sanitizers,
# kvbench beside the Hopper kernel, then on the PTX path kvbench and the int8 block for
# MMA_TIERS (default kvi8s kvmix; MMA_BLOCK= skips the blocks).
# QUICK=1 with tests: the suite, the Python tests and the ComfyUI e2e alone (~5 minutes).
# ptx80 (also part of tests): the whole GPU suite, then the sm_80 code paths on this GPU: the
# driver made to JIT-compile the compute_80 PTX (CUDA_FORCE_PTX_JIT=1), so no Hopper kernel
# runs, as on Ampere/Ada cards (their sm_80 image is the same code) and Blackwell (that PTX):
# the exact paths' tests (PTX80_FILTER) and h3s demo per format, streamed == stock; then
# the decode paths of kvfp4s and kvi8r (DECODE_TIERS: memcheck, kvbench and the int8 block
# at DECODE_TOKENS, default 217088). decode: that last part alone (a second call when ptx80
# with DECODE_TOKENS= (empty) ran the tests).
# tiers: the K/V tier GPU tests on each kvi8r, kvi8s and kvfp4s kernel (the suite's
# --attn-kernel: KVI8R_KERNELS, KVI8S_KERNELS, KVFP4S_KERNELS, default "default" and the one
# other kernel each keeps: sm80 for kvi8r's decode path and kvi8s' mma.sync kernel, sm90 for
# kvfp4s' Hopper kernel), racecheck/synccheck on each tier's kernel (SANITIZE_FILTERS), kvbench
# (error and speed against the exact kernel) at the token list (default 217088) for the
# defaults (KV_TIERS) and the other kernels (KVI8R_BENCH_KERNELS, KVI8S_BENCH_KERNELS,
# KVFP4S_BENCH_KERNELS: h3s kvbench --attn-kernel), each tier at 300,001 tokens (LONG_TOKENS, LONG_TIERS), the int8
# block with each tier's store beside the exact store's (streamed and stock, bit-equality
# within the tier; BLOCK_TIERS, default KV_TIERS) and the PyTorch anchor (TORCH_ANCHOR=0
# skips it); FULL_SUITE=1 runs the whole GPU test suite first.
# bench: the blocks per format and the PyTorch anchor; GEMM_KERNELS (e.g. "sm80") adds the
# int8 block's phase times on those GEMMs (h3s bench --gemm-kernel).
# attention: the GPU tests (every test on the default kernels, the attention, block and
# GEMM tests again on the mma.sync route: --attn-kernel=sm80, --gemm-kernel=sm80),
# sanitizers, then attention alone on both kernels at the token list (default 217088), the
# int8 block, and the PyTorch anchor with both SDPA backends (flash: what ComfyUI runs;
# cuDNN: the bar).
# placement: one full-width int8 block at 217,088 tokens (PLACEMENT_TOKENS) under activation
# budgets of 16, 8, 4 and 2 GiB (host-staged K/V, then x, when they do not fit) beside the
# unbudgeted run, each with stock for bit-equality; 1 GiB must be refused before any work;
# the 2 GiB budget again with each staging tile forced; then 1,000,000 tokens under 14 GiB
# of activations, the process at most 15.4 GiB by the driver, beside stock.
# Every step has its own time limit and writes its output under $OUT as it goes, so a step
# that overruns still leaves the others' results. H3S_REQUIRE_GPU=1 turns every GPU test's
# "no device" skip into a failure (gtest and pytest), and a skipped test fails its step: on
# this machine a green run means every GPU test ran. The script exits non-zero when any
# step failed and names the failed steps last.
set -uo pipefail
mode=${1:-all}
default_tokens=32768,131072,217088
[ "$mode" = attention ] && default_tokens=217088
[ "$mode" = tiers ] && default_tokens=217088
[ "$mode" = mma ] && default_tokens=217088
tokens=${2:-$default_tokens}
formats=${3:-int8,bf16,w4a8}
OUT=${OUT:-/tmp/h3s-out}
mkdir -p "$OUT"
export H3S_REQUIRE_GPU=1
bin=.devbin
# The binaries come packed (scripts/device-build.sh): carried unpacked with the tree they
# pass the device call's 64 MiB. Unpacked every call: a warm machine keeps the last call's.
if [ -f .devbin.tgz ]; then rm -rf $bin && mkdir -p $bin && tar -xzf .devbin.tgz -C $bin; fi
failed=()
# step, no_skips
source "$(dirname "$0")/device-steps.sh"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"; then
  failed+=("nvidia-smi")
fi
# The attention kernels kept beside each GPU's default (src/backend/cuda/kernel_choice.hpp):
# sm80, the mma.sync kernel other GPUs run.
attn_kernels="sm80"
if [ "$mode" = tiers ]; then
  # KVI8R_KERNELS / KVI8S_KERNELS / KVFP4S_KERNELS: the --attn-kernel choices the tier's
  # tests run on (empty skips the tier's tests); *_BENCH_KERNELS: the other kernel timed
  # beside the default; KV_TIERS: the tiers measured (kvbench, the int8
  # block); LONG_TOKENS: the tiers (LONG_TIERS, default KV_TIERS) again at that length
  # (gaussian, no baseline; empty skips); TORCH_ANCHOR=0 skips the PyTorch blocks;
  # FULL_SUITE=1 runs the whole GPU suite first, else EXTRA_TESTS (a gtest filter) if set.
  if [ "${FULL_SUITE-0}" = 1 ]; then
    step gpu_tests 300 $bin/h3s_tests_gpu --gtest_output=json:"$OUT/gpu_tests.json"
    [ -f "$OUT/gpu_tests.json" ] && no_skips gpu_tests "$OUT/gpu_tests.json"
  elif [ -n "${EXTRA_TESTS-}" ]; then  # a gtest filter: the new tests without the whole suite
    step gpu_tests_extra 200 $bin/h3s_tests_gpu --gtest_filter="$EXTRA_TESTS" \
      --gtest_output=json:"$OUT/gpu_tests_extra.json"
    [ -f "$OUT/gpu_tests_extra.json" ] && no_skips gpu_tests_extra "$OUT/gpu_tests_extra.json"
  fi
  for k in ${KVI8R_KERNELS-default sm80}; do
    step "gpu_tests_kvi8r_$k" 120 $bin/h3s_tests_gpu --attn-kernel=$k \
      --gtest_filter='GpuKvi8r.*:*ApproximateTiers*' --gtest_output=json:"$OUT/gpu_tests_kvi8r_$k.json"
    [ -f "$OUT/gpu_tests_kvi8r_$k.json" ] && no_skips "gpu_tests_kvi8r_$k" "$OUT/gpu_tests_kvi8r_$k.json"
  done
  for k in ${KVI8S_KERNELS-default sm80}; do
    step "gpu_tests_kvi8s_$k" 120 $bin/h3s_tests_gpu --attn-kernel=$k \
      --gtest_filter='*GpuKvStore.*/kvi8s:*ApproximateTiers*' --gtest_output=json:"$OUT/gpu_tests_kvi8s_$k.json"
    [ -f "$OUT/gpu_tests_kvi8s_$k.json" ] && no_skips "gpu_tests_kvi8s_$k" "$OUT/gpu_tests_kvi8s_$k.json"
  done
  for k in ${KVFP4S_KERNELS-default sm90}; do
    step "gpu_tests_kvfp4s_$k" 120 $bin/h3s_tests_gpu --attn-kernel=$k \
      --gtest_filter='*GpuKvStore.*/kvfp4s:*ApproximateTiers*' --gtest_output=json:"$OUT/gpu_tests_kvfp4s_$k.json"
    [ -f "$OUT/gpu_tests_kvfp4s_$k.json" ] && no_skips "gpu_tests_kvfp4s_$k" "$OUT/gpu_tests_kvfp4s_$k.json"
  done
  kv_tiers=${KV_TIERS-kvi8r kvi8s kvfp4s}
  for t in ${tokens//,/ }; do
    for tier in $kv_tiers; do
      step "kvbench_${tier}_default_$t" 300 $bin/h3s kvbench \
        --kv-store $tier --backend cuda --tokens "$t" --no-baseline --json
    done
    for k in ${KVFP4S_BENCH_KERNELS-sm90}; do
      step "kvbench_kvfp4s_${k}_$t" 200 $bin/h3s kvbench --attn-kernel "$k" \
        --kv-store kvfp4s --backend cuda --tokens "$t" --no-baseline --inputs gaussian --json
    done
    for k in ${KVI8S_BENCH_KERNELS-sm80}; do
      step "kvbench_kvi8s_${k}_$t" 200 $bin/h3s kvbench --attn-kernel "$k" \
        --kv-store kvi8s --backend cuda --tokens "$t" --no-baseline --inputs gaussian --json
    done
    for kv in bf16 ${BLOCK_TIERS-$kv_tiers}; do
      step "bench_int8_${kv}_$t" 240 $bin/h3s bench --backend cuda --preset h3 --format int8 \
        --token-list "$t" --json --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384 \
        --kv-store $kv --skip-attention
    done
    # The PyTorch anchor beside those blocks (flash: what ComfyUI runs; cuDNN: the bar).
    if [ "${TORCH_ANCHOR-1}" = 0 ]; then
      :
    elif [ -f .ext/torch_h3_block.py ]; then
      step "torch_block_flash_$t" 300 env ATTN=FLASH_ATTENTION python3 .ext/torch_h3_block.py "$t"
      step "torch_block_cudnn_$t" 300 env ATTN=CUDNN_ATTENTION python3 .ext/torch_h3_block.py "$t"
    else
      failed+=("torch anchor (.ext/torch_h3_block.py not carried)")
    fi
    for k in ${KVI8R_BENCH_KERNELS-sm80}; do
      step "kvbench_kvi8r_${k}_$t" 200 $bin/h3s kvbench --attn-kernel "$k" \
        --kv-store kvi8r --backend cuda --tokens "$t" --no-baseline --inputs gaussian --json
    done
  done
  # Every tier past 2^31 bytes of K/V views (64-bit offsets).
  for t in ${LONG_TOKENS-300001}; do
    for tier in ${LONG_TIERS-$kv_tiers}; do
      step "kvbench_${tier}_long_$t" 300 $bin/h3s kvbench \
        --kv-store $tier --backend cuda --tokens "$t" --no-baseline --inputs gaussian --json
    done
  done
  for filter in ${SANITIZE_FILTERS-GpuKvi8r.ChunksAndBlocksGiveTheSinglePassBits \
    Tiers/GpuKvStore.ChunksAndBlocksGiveTheSinglePassBits/kvi8s \
    Tiers/GpuKvStore.ChunksAndBlocksGiveTheSinglePassBits/kvfp4s}; do
    name=$(echo "$filter" | tr -c 'A-Za-z0-9\n' '_')
    for tool in racecheck synccheck; do
      step "${tool}_$name" 150 compute-sanitizer --tool $tool --error-exitcode 9 \
        $bin/h3s_tests_gpu --gtest_filter="$filter"
    done
  done
fi
if [ "$mode" = mma ]; then
  # kvi8s' mma.sync kernel (the RTX 40/50-series path). On Hopper: its tests on its
  # sm_90a image (--attn-kernel=sm80) and on its compute_89 PTX (CUDA_FORCE_PTX_JIT=1:
  # the code sm_89+ cards run, beside the exact mma.sync kernel they run), the
  # sanitizers on it, kvbench against the Hopper default, then on the PTX path kvbench
  # and the int8 block (beside the exact store there) for MMA_TIERS. On an sm_89+ card
  # without Hopper's image the same steps run natively (no JIT, no Hopper kernel).
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1)
  if [ "$cc" = 9.0 ]; then rtx="env CUDA_FORCE_PTX_JIT=1"; hopper_kernels="default sm80 default"
  else rtx="env"; hopper_kernels=sm80; fi
  step gpu_tests_mma 200 $bin/h3s_tests_gpu --attn-kernel=sm80 \
    --gtest_filter='*GpuKvStore.*/kvi8s:GpuKvi8sKernels.Mma*:*ApproximateTiers*' \
    --gtest_output=json:"$OUT/gpu_tests_mma.json"
  [ -f "$OUT/gpu_tests_mma.json" ] && no_skips gpu_tests_mma "$OUT/gpu_tests_mma.json"
  step gpu_tests_mma_ptx 300 $rtx $bin/h3s_tests_gpu \
    --gtest_filter='GpuArch.TheLoadedImage*:*GpuKvStore.*/kvi8s:GpuKvMix.*:*GpuBlockExact.ApproximateTiers*:GpuKvi8sKernels.Mma*' \
    --gtest_output=json:"$OUT/gpu_tests_mma_ptx.json"
  [ -f "$OUT/gpu_tests_mma_ptx.json" ] && no_skips gpu_tests_mma_ptx "$OUT/gpu_tests_mma_ptx.json"
  for tool in memcheck racecheck synccheck; do
    step "${tool}_mma" 150 compute-sanitizer --tool $tool \
      --error-exitcode 9 $bin/h3s_tests_gpu --attn-kernel=sm80 \
      --gtest_filter='Tiers/GpuKvStore.ChunksAndBlocksGiveTheSinglePassBits/kvi8s'
  done
  for t in ${tokens//,/ }; do
    for k in $hopper_kernels; do
      step "kvbench_kvi8s_${k}_$t" 200 $bin/h3s kvbench --attn-kernel "$k" \
        --kv-store kvi8s --backend cuda --tokens "$t" --no-baseline --inputs gaussian --json
    done
    for tier in ${MMA_TIERS-kvi8s kvmix}; do
      step "kvbench_${tier}_ptx_$t" 300 $rtx $bin/h3s kvbench \
        --kv-store $tier --backend cuda --tokens "$t" --no-baseline --inputs gaussian --json
    done
    if [ -n "${MMA_BLOCK-1}" ]; then
      for kv in bf16 ${MMA_TIERS-kvi8s kvmix}; do
        step "bench_int8_${kv}_ptx_$t" 300 $rtx $bin/h3s bench \
          --backend cuda --preset h3 --format int8 --token-list "$t" --json --q-chunk 16384 \
          --kv-chunk 16384 --mlp-chunk 16384 --kv-store $kv --skip-attention
      done
    fi
  done
fi
if [ "$mode" != bench ] && [ "$mode" != placement ] && [ "$mode" != tiers ] && [ "$mode" != ptx80 ] &&
  [ "$mode" != decode ] && [ "$mode" != mma ] && [ "$mode" != wheel ]; then
  step gpu_tests 300 $bin/h3s_tests_gpu --gtest_output=json:"$OUT/gpu_tests.json"
  [ -f "$OUT/gpu_tests.json" ] && no_skips gpu_tests "$OUT/gpu_tests.json"
  # QUICK=1: the suite, the Python tests and the e2e only (a call that must leave device
  # time for another): no second kernel route, no sanitizers, no sm_80 JIT steps.
  [ "${QUICK-0}" = 1 ] && attn_kernels=""
  # The other attention kernel (the mma.sync kernel of other GPUs) through the attention
  # and block checks.
  for k in $attn_kernels; do
    step "gpu_tests_attn_$k" 120 $bin/h3s_tests_gpu --attn-kernel=$k \
      --gtest_filter='GpuAttention.*:GpuOps.Attention*:*GpuBlock*:GpuForward.*'
  done
  # The mma.sync GEMMs (other GPUs; W4A8 in two stages) through the GEMM and block checks.
  if [ "${QUICK-0}" != 1 ]; then
    step gpu_tests_gemm_sm80 120 $bin/h3s_tests_gpu --gemm-kernel=sm80 \
      --gtest_filter='GpuGemm.*:GpuGemmW4A8.*:*GpuBlock*:GpuForward.*'
    step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 $bin/h3s demo \
      --backend cuda --tokens 600 --json
    step racecheck 180 compute-sanitizer --tool racecheck --error-exitcode 9 $bin/h3s_tests_gpu \
      --gtest_filter='GpuOps.AttentionBlockedEqualsSinglePassAndNearCpu'
    step synccheck 180 compute-sanitizer --tool synccheck --error-exitcode 9 $bin/h3s_tests_gpu \
      --gtest_filter='GpuOps.AttentionBlockedEqualsSinglePassAndNearCpu'
  fi
  # The Python module's tests on the CUDA wheel; tests/python/conftest.py turns a skip
  # into a failure under H3S_REQUIRE_GPU, so the CUDA cases cannot pass by skipping.
  if compgen -G ".whl/h3stream-*.whl" >/dev/null; then
    site=/tmp/h3s-site
    rm -rf "$site"
    step wheel_install 120 python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --target "$site" .whl/h3stream-*.whl
    step pytest_cuda 300 env PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1 \
      bash -c 'cd tests/python && python3 -m pytest -q -rs -p no:cacheprovider --confcutdir=. .'
  else
    echo "no .whl/h3stream-*.whl: build it with scripts/device-build.sh --wheel"
    failed+=("pytest_cuda (no CUDA wheel carried)")
  fi
  # The node pack in a real ComfyUI on the GPU (scripts/comfyui-e2e.sh: every streamed run
  # bit-equal to h3stream's stock block, the int8 quantiser bit-equal to comfy-kitchen's);
  # carry .ext (scripts/comfyui-e2e-prepare.sh) and .whl. Its reports come back as one file.
  if [ -d .ext/ComfyUI ]; then
    e2e_out=/tmp/h3s-comfyui-e2e
    rm -rf "$e2e_out"
    step comfyui_e2e 400 env OUT="$e2e_out" H3S_E2E_SITE=/tmp/h3s-e2e-site \
      bash scripts/comfyui-e2e.sh .ext/ComfyUI int8,bf16
    tar -czf "$OUT/comfyui-e2e.tgz" -C "$e2e_out" . 2>/dev/null
  else
    echo "no .ext/ComfyUI: make it with scripts/comfyui-e2e-prepare.sh (here, with PyPI)"
    failed+=("comfyui_e2e (no ComfyUI carried)")
  fi
fi
# The sm_80 code paths after the suite, the Python tests and the e2e: in a call that runs
# out of time, the JIT steps (the slowest) are the ones lost.
if [ "$mode" = ptx80 ]; then
  step gpu_tests 300 $bin/h3s_tests_gpu --gtest_output=json:"$OUT/gpu_tests.json"
  [ -f "$OUT/gpu_tests.json" ] && no_skips gpu_tests "$OUT/gpu_tests.json"
fi
if [ "$mode" != bench ] && [ "$mode" != placement ] && [ "$mode" != tiers ] &&
  [ "$mode" != decode ] && [ "$mode" != mma ] && [ "$mode" != wheel ] && [ "${QUICK-0}" != 1 ]; then
  # The sm_80 code on this GPU (see ptx80 above). Hopper-only tests are left out: the
  # Hopper kernels of kvi8r/kvi8s/kvmix (kvi8s runs its mma.sync kernel from the
  # compute_89 PTX, kvfp4s and kvi8r by their decode paths, the default there, and
  # kvmix on those), the wgmma/TMA probe and kvfp4s' Hopper kernel.
  ptx80_filter=${PTX80_FILTER-'GpuArch.TheLoadedImage*:GpuGemm.*:GpuGemmW4A8.*:GpuAttention.*:GpuOps.*:GpuGolden.*:GpuW4A8Backend.*:GpuNvfp4*:GpuStageQueue.*:*GpuBlockExact.StreamedEqualsStock*:*GpuBlockExact.MatchesTheCpu*:*GpuBlockExact.ApproximateTiers*:GpuForward.*:GpuLatentForward.*:GpuPlacement.*:*GpuKvStore.*/kvfp4s:*GpuKvStore.*/kvi8s:GpuKvMix.*:GpuKvfp4sKernels.DecodeKernel*:GpuKvi8r.RowOps*:GpuKvi8rDecode.*:GpuKvi8sKernels.Mma*'}
  step gpu_tests_ptx80 600 env CUDA_FORCE_PTX_JIT=1 $bin/h3s_tests_gpu \
    --gtest_filter="$ptx80_filter" --gtest_output=json:"$OUT/gpu_tests_ptx80.json"
  [ -f "$OUT/gpu_tests_ptx80.json" ] && no_skips gpu_tests_ptx80 "$OUT/gpu_tests_ptx80.json"
  for f in ${formats//,/ } nvfp4; do
    step "demo_ptx80_$f" 300 bash -c "CUDA_FORCE_PTX_JIT=1 $bin/h3s demo --backend cuda \
      --tokens 3000 --format $f --q-chunk 997 --kv-chunk 1031 --mlp-chunk 613 --json \
      | tee /dev/stderr | grep -q '\"bit_equal\":true'"
  done
fi
if [ "$mode" = ptx80 ] || [ "$mode" = decode ]; then
  # The decode paths of kvfp4s and kvi8r (decode blocks, then the exact kernel): the decode
  # kernels under memcheck; per tier, attention alone and the int8 block beside the exact
  # store's at the token list on the compute_80 code, and on this image each tier's two
  # kernels (kvi8r: its Hopper kernel, default, and its decode path, sm80; kvfp4s: its
  # decode path, default, and its Hopper kernel, sm90) (DECODE_TOKENS; empty skips). The
  # decode blocks are kernel_choice.hpp's: 16,384 keys for kvfp4s on Hopper, else 4096.
  step memcheck_kv_decode 180 env CUDA_FORCE_PTX_JIT=1 \
    compute-sanitizer --tool memcheck --error-exitcode 9 $bin/h3s_tests_gpu \
    --gtest_filter='GpuKvfp4sKernels.DecodeKernel*:GpuKvi8rDecode.DecodeWrites*'
  for t in ${DECODE_TOKENS-217088}; do
    for tier in ${DECODE_TIERS-kvfp4s kvi8r}; do
      other=$([ "$tier" = kvi8r ] && echo sm80 || echo sm90)
      step "kvbench_${tier}_ptx80_$t" 300 env CUDA_FORCE_PTX_JIT=1 \
        $bin/h3s kvbench --kv-store "$tier" --backend cuda --tokens "$t" --no-baseline \
        --inputs gaussian --json
      for k in default "$other"; do
        step "kvbench_${tier}_${k}_$t" 200 $bin/h3s kvbench --attn-kernel "$k" \
          --kv-store "$tier" --backend cuda --tokens "$t" --no-baseline --inputs gaussian --json
      done
    done
    for kv in bf16 ${DECODE_TIERS-kvfp4s kvi8r}; do
      step "bench_int8_${kv}_ptx80_$t" 300 env CUDA_FORCE_PTX_JIT=1 $bin/h3s bench --backend cuda \
        --preset h3 --format int8 --token-list "$t" --json --q-chunk 16384 --kv-chunk 16384 \
        --mlp-chunk 16384 --kv-store $kv --skip-attention
    done
  done
fi
if [ "$mode" = wheel ]; then
  whl=$(ls dist/h3stream-*-cp312-abi3-manylinux_*_x86_64.whl 2>/dev/null | head -n 1)
  if [ -z "$whl" ]; then
    echo "no dist/h3stream-*-cp312-abi3-manylinux_*.whl: build it with scripts/build-wheel.sh"
    failed+=("wheel (no release wheel carried)")
  else
    venv=/tmp/h3s-wheel-venv
    clean=/tmp/h3s-clean-path  # the commands the steps use, and no compiler
    rm -rf "$venv" "$clean" && mkdir -p "$clean"
    # The device image's python3 (3.12) is itself a venv (/opt/torch/.venv), so
    # --system-site-packages would reach the bare interpreter's site, without torch or pytest:
    # a .pth puts the image's site-packages after the new venv's own, as a ComfyUI install's are.
    "${WHEEL_PYTHON:-python3}" -m venv "$venv"
    "${WHEEL_PYTHON:-python3}" -c 'import site; print("\n".join(site.getsitepackages()))' \
      >"$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/device-image.pth"
    for t in bash sh env cat ls mkdir rm cp mv tar gzip grep sed awk head tail sort tee \
      dirname basename readlink date sleep timeout nvidia-smi ldd uname find xargs wc cut tr; do
      p=$(command -v "$t") && ln -s "$p" "$clean/$t"
    done
    # (an array, not a function: step runs its command under timeout)
    clean_env=(env -u LD_LIBRARY_PATH -u PYTHONPATH PATH="$venv/bin:$clean" H3S_REQUIRE_GPU=1)
    step wheel_env 30 "${clean_env[@]}" bash -c 'for c in nvcc gcc cc c++ g++ clang; do
      command -v "$c" && { echo "a compiler on PATH: $c"; exit 1; }; done
      echo "PATH=$PATH; no compiler; LD_LIBRARY_PATH ${LD_LIBRARY_PATH-unset}"; python --version'
    # ComfyUI's import-time wheels (carried in .whl/ for the e2e) beside ours, never .whl's h3stream
    deps=""
    for w in .whl/*.whl dist/tools/*.whl; do
      [[ -f $w && $w != */h3stream-* ]] && deps+="$w "
    done
    step wheel_install 180 "${clean_env[@]}" python -m pip install -q --no-index --no-deps \
      --disable-pip-version-check "$whl" $deps
    step wheel_build_info 60 "${clean_env[@]}" python -c 'import h3stream, json
info = h3stream.build_info()
print(json.dumps(info, indent=1))
assert info.get("cuda") and info["cuda"].get("device"), "build_info: no GPU image in use"
missing = {"sm_80", "sm_86", "sm_89", "sm_90a", "sm_120"} - set(info["cuda"]["sass"])
assert not missing, f"build_info: the wheel lacks {sorted(missing)}"'
    step wheel_ldd 30 "${clean_env[@]}" bash -c 'ldd "$(python -c "import h3stream._h3stream as m; print(m.__file__)")"'
    if "${clean_env[@]}" python -c 'import auditwheel' 2>/dev/null; then
      step wheel_auditwheel 60 "${clean_env[@]}" python -m auditwheel show "$whl"
    else
      echo "no auditwheel carried (dist/tools/: scripts/build-wheel.sh downloads it)"
      failed+=("wheel_auditwheel (not carried)")
    fi
    step wheel_pytest_cuda 300 "${clean_env[@]}" PYTHONDONTWRITEBYTECODE=1 \
      bash -c 'cd tests/python && python -m pytest -q -rs -p no:cacheprovider --confcutdir=. .'
    if [ -d .ext/ComfyUI ]; then
      e2e_out=/tmp/h3s-wheel-e2e
      rm -rf "$e2e_out"
      step wheel_comfyui_e2e 400 "${clean_env[@]}" OUT="$e2e_out" PYTHON="$venv/bin/python" \
        bash scripts/comfyui-e2e.sh .ext/ComfyUI int8,bf16
      tar -czf "$OUT/wheel-comfyui-e2e.tgz" -C "$e2e_out" . 2>/dev/null
    else
      failed+=("wheel_comfyui_e2e (no .ext/ComfyUI carried)")
    fi
  fi
fi
if [ "$mode" = placement ] || [ "$mode" = all ]; then
  ptokens=${PLACEMENT_TOKENS:-217088}
  # Two repetitions, the faster reported: the first pins the host staging
  # memory (~0.2 s per GiB; kept for later calls, as a sampler's steps reuse it).
  # PLACEMENT_BUDGETS="" skips these (the 1M-token step alone, with PLACEMENT_TILES="").
  for b in ${PLACEMENT_BUDGETS-0 16GiB 8GiB 4GiB 2GiB}; do
    skip_attn=--skip-attention
    [ "$b" = 0 ] && skip_attn=""
    step "placement_$b" 300 $bin/h3s bench --backend cuda --preset h3 --format int8 \
      --token-list "$ptokens" --json --reps 2 --vram-budget "$b" $skip_attn
  done
  # The planner's alternatives at 2 GiB: the staging tile forced (it then
  # takes the most query chunks a pass that fit); PLACEMENT_TILES="" skips them.
  for kb in ${PLACEMENT_TILES-2048 4096 8192}; do
    step "placement_2GiB_kv$kb" 300 $bin/h3s bench --backend cuda --preset h3 --format int8 \
      --token-list "$ptokens" --json --reps 2 --vram-budget 2GiB --kv-block $kb --skip-attention
  done
  # Refused before any work: exit 1 (not 3, bits differ, nor a crash).
  step placement_1GiB_refused 120 bash -c "$bin/h3s bench --backend cuda --preset h3 \
    --format int8 --token-list $ptokens --reps 1 --vram-budget 1GiB; [ \$? -eq 1 ]"
  # 1M tokens through one block on a 16 GB card's room: PLACEMENT_1M_BUDGET (13.5GiB) of
  # activations beside the block's 0.91 GB of weights, and the whole process read from the
  # driver (device_in_use_driver_gib, its peak sampled over the run: the CUDA context,
  # libraries' workspaces and the pool included; the ledger's device_total_gib leaves them
  # out) at most 15.4 GiB, what a 16 GB card leaves free (the headline's fence). On an H100
  # the driver reads 0.60 GiB above the ledger: 14GiB read 15.51, 13.5GiB 14.85 (2026-12-07).
  # Stock beside it for bit-equality needs ~81 GiB: PLACEMENT_1M_STOCK=0 skips it (on an
  # 80 GB card it cannot run).
  skip_stock=""
  [ "${PLACEMENT_1M_STOCK:-1}" = 0 ] && skip_stock=--skip-stock
  step placement_1M 600 $bin/h3s bench --backend cuda --preset h3 --format int8 \
    --token-list 1000000 --json --reps 1 $skip_stock --skip-attention \
    --vram-budget "${PLACEMENT_1M_BUDGET:-13.5GiB}" --host-budget 64GiB
  step placement_1M_driver 10 python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]
d, ledger = r["device_in_use_driver_gib"], r["device_total_gib"]
if d is None: sys.exit("1M tokens: no driver reading in the JSON")
print(f"1M tokens: {d:.2f} GiB on the device by the driver, {ledger:.2f} GiB by the ledger")
# the driver counts all the ledger does and more: a reading below it missed the peak
if d + 0.05 < ledger: sys.exit("1M tokens: the driver reading is below the ledger: not a peak")
sys.exit(0 if d <= 15.4 else 1)' "$OUT/placement_1M.txt"
fi
if [ "$mode" = attention ]; then
  step bench_attention 400 $bin/h3s bench --backend cuda --preset h3 --format int8 \
    --token-list "$tokens" --json --only-attention --attn-kernels "${attn_kernels// /,}"
  step bench_int8 300 $bin/h3s bench --backend cuda --preset h3 --format int8 \
    --token-list "$tokens" --json --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384
  if [ -f .ext/torch_h3_block.py ]; then
    step torch_block_flash 300 env ATTN=FLASH_ATTENTION python3 .ext/torch_h3_block.py ${tokens//,/ }
    step torch_block_cudnn 300 env ATTN=CUDNN_ATTENTION python3 .ext/torch_h3_block.py ${tokens//,/ }
  else
    failed+=("torch anchor (.ext/torch_h3_block.py not carried)")
  fi
fi
if [ "$mode" != tests ] && [ "$mode" != ptx80 ] && [ "$mode" != placement ] && [ "$mode" != attention ] &&
  [ "$mode" != tiers ] && [ "$mode" != decode ] && [ "$mode" != mma ] && [ "$mode" != wheel ]; then
  for f in ${formats//,/ }; do
    step "bench_$f" 300 $bin/h3s bench --backend cuda --preset h3 --format "$f" \
      --token-list "$tokens" --json --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384
  done
  # The other GEMMs (h3s bench --gemm-kernel; the same bits), by phase.
  for g in ${GEMM_KERNELS-}; do
    step "bench_int8_gemm_$g" 300 $bin/h3s bench --backend cuda --gemm-kernel "$g" \
      --preset h3 --format int8 --token-list "$tokens" --json --q-chunk 16384 --kv-chunk 16384 \
      --mlp-chunk 16384 --skip-stock --skip-attention --phase-times
  done
  # The PyTorch anchor with both SDPA backends (flash: what ComfyUI runs; cuDNN: the bar).
  if [ -f .ext/torch_h3_block.py ]; then
    step torch_block_flash 300 env ATTN=FLASH_ATTENTION python3 .ext/torch_h3_block.py ${tokens//,/ }
    step torch_block_cudnn 300 env ATTN=CUDNN_ATTENTION python3 .ext/torch_h3_block.py ${tokens//,/ }
  fi
fi
if [ ${#failed[@]} -gt 0 ]; then
  printf 'device-check: FAILED steps:' | tee -a "$OUT/steps.txt"
  printf ' [%s]' "${failed[@]}" | tee -a "$OUT/steps.txt"
  echo | tee -a "$OUT/steps.txt"
  exit 1
fi
echo "device-check: every step passed" | tee -a "$OUT/steps.txt"
