#!/usr/bin/env bash
# Runs ON the GPU machine, from the repo root, over .devbin/ (scripts/device-build.sh)
# and .ext/torch_h3_block.py (the PyTorch anchor, carried). One call: GPU tests,
# compute-sanitizer, block benchmark and the PyTorch reference; JSON under $OUT.
#   usage: bash scripts/device-check.sh [tests|bench|all] [token list]
set -uo pipefail
mode=${1:-all}
tokens=${2:-32768,131072,217088}
OUT=${OUT:-/tmp/h3s-out}
mkdir -p "$OUT"
bin=.devbin
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "$mode" != bench ]; then
  echo "== GPU tests =="
  $bin/h3s_tests_gpu --gtest_output=json:"$OUT/gpu_tests.json" 2>&1 | tail -n 60
  echo "== compute-sanitizer memcheck (tiny forward) =="
  compute-sanitizer --tool memcheck --error-exitcode 9 $bin/h3s demo --backend cuda \
    --tokens 600 --json >"$OUT/memcheck.txt" 2>&1
  echo "memcheck rc=$?"; tail -n 3 "$OUT/memcheck.txt"
  echo "== compute-sanitizer racecheck (attention) =="
  compute-sanitizer --tool racecheck --error-exitcode 9 $bin/h3s_tests_gpu \
    --gtest_filter='GpuOps.AttentionBlockedEqualsSinglePassAndNearCpu' >"$OUT/racecheck.txt" 2>&1
  echo "racecheck rc=$?"; tail -n 3 "$OUT/racecheck.txt"
fi
if [ "$mode" != tests ]; then
  echo "== h3s bench (one full-size H3 block) =="
  for f in int8 bf16 w4a8; do
    $bin/h3s bench --backend cuda --preset h3 --format "$f" --token-list "$tokens" --json \
      --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384 | tee "$OUT/bench_$f.jsonl"
  done
  if [ -f .ext/torch_h3_block.py ]; then
    echo "== PyTorch reference block (same run) =="
    python3 .ext/torch_h3_block.py ${tokens//,/ } | tee "$OUT/torch_block.txt"
  fi
fi
