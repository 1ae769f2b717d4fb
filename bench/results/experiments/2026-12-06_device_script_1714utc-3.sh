#!/usr/bin/env bash
# Session 42, call 1: warm, interleaved kvi8s vs SageAttention-2's sm90 kernel at 32,768 and
# 217,088 tokens (gaussian inputs for both), one clock log. kvbench --repeat N reports the median
# of N timed runs; sage2_bench reports each rep.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export H3S_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,power.limit,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 100 > "$OUT/smi.csv" &
SMI=$!
R="$OUT/runs.txt"
k() { local name=$1 tokens=$2; shift 2; local t0=$(date +%s.%N)
  timeout 100 .devbin/h3s kvbench --backend cuda --tokens "$tokens" --json --no-baseline "$@" > "$OUT/kvbench_$name.json" 2>> "$OUT/stderr.txt"
  echo "kvbench_$name rc=$? $t0 $(date +%s.%N)" | tee -a "$R"
  python3 -c "import json,sys; i=json.load(open(sys.argv[1]))['inputs'][0]; print({k: i.get(k) for k in ('name','tops','speed_vs_exact','rel_rms','seconds','exact_seconds')})" "$OUT/kvbench_$name.json" 2>&1 | tail -1; }
sg() { local name=$1; shift; local t0=$(date +%s.%N)
  timeout 60 .ext/sage2/sage2_bench "$@" > "$OUT/$name.jsonl" 2>> "$OUT/stderr.txt"
  echo "$name rc=$? $t0 $(date +%s.%N)" | tee -a "$R"; cat "$OUT/$name.jsonl"; }
k kvi8s_32768_a 32768 --kv-store kvi8s --inputs gaussian --repeat 7
sg sage2_32768 32768 56 7
k kvi8s_32768_b 32768 --kv-store kvi8s --inputs gaussian --repeat 7
sg sage2_217088_a 217088 56 3
k kvi8s_217088 217088 --kv-store kvi8s --inputs gaussian --repeat 3
sg sage2_217088_b 217088 56 3
kill $SMI
python3 - "$R" "$OUT/smi.csv" <<'PY' | tee "$OUT/smi_periods.txt"
import datetime, sys
smi = []
for ln in open(sys.argv[2]):
    f = [x.strip() for x in ln.split(',')]
    try:
        t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        smi.append((t, float(f[1].split()[0]), float(f[2].split()[0])))
    except Exception:
        pass
print("# run: its periods above 300 W (seconds, mean SM MHz, mean W), 100 ms samples")
for ln in open(sys.argv[1]):
    name, rc, t0, t1 = ln.split()[:4]
    hot = [s for s in smi if float(t0) <= s[0] <= float(t1) and s[2] > 300]
    per, cur = [], []
    for s in hot:
        if cur and s[0] - cur[-1][0] > 0.35:
            per.append(cur); cur = []
        cur.append(s)
    if cur: per.append(cur)
    print(name, rc, [(round(q[-1][0] - q[0][0], 2), round(sum(x[1] for x in q) / len(q)), round(sum(x[2] for x in q) / len(q))) for q in per])
PY
gzip -f "$OUT/smi.csv"
(cd "$OUT" && tar czf s42_call1_results.tgz --remove-files ./*.json ./*.jsonl ./*.txt smi.csv.gz)
ls -la "$OUT"
