#!/usr/bin/env bash
# Runs ON the GPU machine, from the repo root, over .devbin/ (scripts/device-build.sh)
# and .ext/torch_h3_block.py (the PyTorch anchor, carried). One call: GPU tests,
# compute-sanitizer, block benchmark and the PyTorch reference; JSON under $OUT.
#   usage: bash scripts/device-check.sh [tests|bench|all] [token list] [formats]
# Every step has its own time limit and writes its output under $OUT as it
# goes, so a step that overruns still leaves the others' results.
set -uo pipefail
mode=${1:-all}
tokens=${2:-32768,131072,217088}
formats=${3:-int8,bf16,w4a8}
OUT=${OUT:-/tmp/h3s-out}
mkdir -p "$OUT"
bin=.devbin
step() {  # step NAME SECONDS CMD...: run with a limit, tee to $OUT/NAME.txt
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s) =="
  local t0=$SECONDS
  timeout "$limit" "$@" 2>&1 | tee "$OUT/$name.txt" | tail -n 25
  echo "$name: rc=${PIPESTATUS[0]} in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt"
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "$mode" != bench ]; then
  step gpu_tests 240 $bin/h3s_tests_gpu --gtest_output=json:"$OUT/gpu_tests.json"
  # The mma.sync attention kernel (other GPUs) through the same checks.
  step gpu_tests_attn_sm80 120 env H3S_ATTN_SM80=1 $bin/h3s_tests_gpu \
    --gtest_filter='GpuAttention.*:GpuOps.Attention*:*GpuBlock*:GpuForward.*'
  step memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 $bin/h3s demo \
    --backend cuda --tokens 600 --json
  step racecheck 180 compute-sanitizer --tool racecheck --error-exitcode 9 $bin/h3s_tests_gpu \
    --gtest_filter='GpuOps.AttentionBlockedEqualsSinglePassAndNearCpu'
fi
if [ "$mode" != tests ]; then
  for f in ${formats//,/ }; do
    step "bench_$f" 300 $bin/h3s bench --backend cuda --preset h3 --format "$f" \
      --token-list "$tokens" --json --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384
  done
  if [ -f .ext/torch_h3_block.py ]; then
    step torch_block 300 python3 .ext/torch_h3_block.py ${tokens//,/ }
  fi
fi
