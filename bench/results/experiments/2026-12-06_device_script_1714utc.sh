#!/usr/bin/env bash
# Session 40, call 1: kvi8s in cluster pairs, fixed form (io-pr-ts-mc2: the consumer's remote
# arrive at the default CTA-scope release, no MEMBAR in the loop). Its tests (the bits test,
# the tier tests under it, synccheck), then interleaved with io-pr-ts at 217,088 tokens with a
# 50 ms clock/power log, then the int8 block with kvi8s under each.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export H3S_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,power.limit --format=csv,noheader | tee "$OUT/gpu.txt"
t() { local name=$1 to=$2; shift 2; timeout "$to" "$@" > "$OUT/$name.txt" 2>&1; echo "$name rc=$?" | tee -a "$OUT/tests.txt"; }
t tests_pairs 60 .devbin/h3s_tests_gpu --gtest_filter='GpuKvi8sVariants.ClusterPairs*'
t tests_tiers_mc2 150 env H3S_KVI8S_KERNEL=io-pr-ts-mc2 .devbin/h3s_tests_gpu --gtest_filter='*GpuKvStore.*/kvi8s:*ApproximateTiers*'
t synccheck_mc2 100 env H3S_KVI8S_KERNEL=io-pr-ts-mc2 compute-sanitizer --tool synccheck --error-exitcode 9 \
  .devbin/h3s_tests_gpu --gtest_filter='Tiers/GpuKvStore.ChunksAndBlocksGiveTheSinglePassBits/kvi8s'
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv,noheader -lms 50 > "$OUT/smi_50ms.csv" &
smi=$!
res="$OUT/kvbench.txt"
for v in io-pr-ts io-pr-ts-mc2 io-pr-ts-mc2 io-pr-ts io-pr-ts io-pr-ts-mc2; do
  t0=$(date +%s.%N)
  line=$(H3S_KVI8S_KERNEL=$v timeout 60 .devbin/h3s kvbench --kv-store kvi8s --backend cuda \
    --tokens 217088 --no-baseline --inputs gaussian --json 2>>"$OUT/kvbench_stderr.txt")
  t1=$(date +%s.%N)
  echo "$v $t0 $t1 $line" >> "$res"
done
kill $smi
gzip "$OUT/smi_50ms.csv"
python3 bench/results/experiments/2026-12-05_smi_periods.py "$res" "$OUT/smi_50ms.csv.gz" 2>&1 | tee "$OUT/summary.txt"
for v in io-pr-ts-mc2 io-pr-ts; do
  H3S_KVI8S_KERNEL=$v timeout 120 .devbin/h3s bench --backend cuda --preset h3 --format int8 \
    --token-list 217088 --json --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384 \
    --kv-store kvi8s --skip-attention > "$OUT/block_$v.json" 2> "$OUT/block_$v.err"
  echo "block_$v rc=$?" | tee -a "$OUT/tests.txt"
done
# The PyTorch anchor beside the blocks (flash: what ComfyUI runs), same call.
timeout 200 env ATTN=FLASH_ATTENTION python3 .ext/torch_h3_block.py 217088 > "$OUT/torch_flash.txt" 2>&1
echo "torch_flash rc=$?" | tee -a "$OUT/tests.txt"
tail -3 "$OUT/torch_flash.txt"
grep -hE "FAILED|PASSED|Failure|ERROR SUMMARY" "$OUT"/tests_*.txt "$OUT"/synccheck_mc2.txt | head -20
cat "$OUT/tests.txt"
