#!/usr/bin/env bash
# Session 43, call 3: why kvbench's exact reference (one query chunk, the store's stateful
# path) reads ~556-571 TFLOP/s at 217,088 tokens where `h3s bench --only-attention` (14 query
# chunks) reads 648-660: the same exact kernel timed both ways in one call, with the clock log.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export H3S_REQUIRE_GPU=1
if [ -f .devbin.tgz ]; then rm -rf .devbin && mkdir -p .devbin && tar -xzf .devbin.tgz -C .devbin; fi
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,power.limit,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 100 > "$OUT/smi.csv" &
SMI=$!
R="$OUT/runs.txt"
run() { local name=$1; shift; local t0=$(date +%s.%N)
  timeout 150 "$@" > "$OUT/$name.json" 2>> "$OUT/stderr.txt"
  echo "$name rc=$? $t0 $(date +%s.%N)" | tee -a "$R"; tail -c 600 "$OUT/$name.json"; echo; }
B=".devbin/h3s bench --backend cuda --preset h3 --format int8 --token-list 217088 --only-attention --json"
run attn_q16384_a $B --q-chunk 16384
run attn_q217088 $B --q-chunk 217088
run kvbench_exact_kvi8s .devbin/h3s kvbench --backend cuda --tokens 217088 --json --no-baseline --kv-store kvi8s --inputs gaussian --repeat 3
run attn_q16384_b $B --q-chunk 16384
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
(cd "$OUT" && tar czf s43_call3_results.tgz --remove-files ./*.json ./*.txt smi.csv.gz)
