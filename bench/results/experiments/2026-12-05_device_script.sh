#!/usr/bin/env bash
# Session 39, call 1: kvi8s in cluster pairs (io-pr-ts-mc2: K/V multicast, the same bits) and
# the L2 -> SM traffic upper bounds (ub-halfload, ub-noload: timing only, wrong results),
# interleaved with io-pr-ts at 217,088 tokens with a 50 ms clock/power log; the new tests
# (cluster pairs; the mma test's non-Hopper branch on the PTX path), sanitizers on the pairs.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export H3S_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 120 .devbin/h3s_tests_gpu --gtest_filter='GpuKvi8sVariants.ClusterPairs*' > "$OUT/tests_pairs.txt" 2>&1
echo "tests_pairs rc=$?" | tee -a "$OUT/tests.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv,noheader -lms 50 > "$OUT/smi_50ms.csv" &
smi=$!
res="$OUT/kvbench.txt"
for v in io-pr-ts io-pr-ts-mc2 ub-noload ub-halfload io-pr-ts-mc2 io-pr-ts ub-halfload ub-noload; do
  t0=$(date +%s.%N)
  line=$(H3S_KVI8S_KERNEL=$v timeout 120 .devbin/h3s kvbench --kv-store kvi8s --backend cuda \
    --tokens 217088 --no-baseline --inputs gaussian --json 2>>"$OUT/kvbench_stderr.txt")
  t1=$(date +%s.%N)
  echo "$v $t0 $t1 $line" >> "$res"
done
kill $smi
python3 - "$res" "$OUT/smi_50ms.csv" <<'PY' | tee "$OUT/summary.txt"
import json, sys, datetime
smi = []
for ln in open(sys.argv[2]):
    f = [x.strip() for x in ln.split(",")]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        smi.append((t, float(f[1].split()[0]), float(f[2].split()[0])))
    except Exception:
        pass
for ln in open(sys.argv[1]):
    v, t0, t1, js = ln.split(" ", 3)
    hot = [s for s in smi if float(t0) <= s[0] <= float(t1) and s[2] > 300]
    clk = sum(s[1] for s in hot) / len(hot) if hot else 0
    pw = sum(s[2] for s in hot) / len(hot) if hot else 0
    try:
        d = json.loads(js)
        i = d["inputs"][0]
        print(f"{v:13s} tops {d.get('tops', 0):7.1f} speed_vs_exact {d.get('speed_vs_exact', 0):.3f} rel_rms {i['rel_rms']:.6f} hot-samples {len(hot)} clk {clk:.0f} MHz power {pw:.0f} W")
    except Exception as e:
        print(v, "unparsed", e, js[:300])
PY
gzip "$OUT/smi_50ms.csv"
{
for tool in memcheck synccheck; do
  H3S_KVI8S_KERNEL=io-pr-ts-mc2 timeout 100 compute-sanitizer --tool $tool --error-exitcode 9 \
    .devbin/h3s_tests_gpu --gtest_filter='Tiers/GpuKvStore.ChunksAndBlocksGiveTheSinglePassBits/kvi8s' 2>&1 | tail -3
  echo "$tool rc=${PIPESTATUS[0]}"
done
} >> "$OUT/tests.txt" 2>&1
CUDA_FORCE_PTX_JIT=1 timeout 200 .devbin/h3s_tests_gpu \
  --gtest_filter='GpuArch.TheLoadedImage*:GpuKvi8sVariants.Mma*' > "$OUT/tests_mma_ptx.txt" 2>&1
echo "tests_mma_ptx rc=$?" | tee -a "$OUT/tests.txt"
grep -E "deviation|FAILED|PASSED" "$OUT/tests_mma_ptx.txt" | tail -8
grep -E "FAILED|PASSED|Failure|Expected" "$OUT/tests_pairs.txt" | head -10
cat "$OUT/tests.txt"
