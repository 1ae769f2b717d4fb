#!/usr/bin/env bash
# Session 43, call 1: what the owner's options (b) and (c) of issue 12 would give at 217,088
# tokens on the H200 -- timing-only kernels on today's store (wrong results by design):
#   x-nd       no digit columns, no q.mean correction: the kernel a sequence-wide K mean needs (b)
#   x-gall     P V accumulated on the tensor cores over the whole call, one fold at the end,
#              acc/l/o rescaled only when a row's max moves: a single-level accumulator (c)
#   x-nd-gall  both (b)+(c);  x-nd-g8  (b) with one fold every 8 tiles
# interleaved with the default io-pr-ts (first and last), one clock log.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export H3S_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,power.limit,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 100 > "$OUT/smi.csv" &
SMI=$!
R="$OUT/runs.txt"
k() { local name=$1 tokens=$2 kern=$3; shift 3; local t0=$(date +%s.%N)
  H3S_KVI8S_KERNEL=$kern timeout 110 .devbin/h3s kvbench --backend cuda --tokens "$tokens" --json --no-baseline --kv-store kvi8s --inputs gaussian "$@" > "$OUT/kvbench_$name.json" 2>> "$OUT/stderr.txt"
  echo "kvbench_$name rc=$? $t0 $(date +%s.%N)" | tee -a "$R"
  python3 -c "import json,sys; i=json.load(open(sys.argv[1]))['inputs'][0]; print({k: i.get(k) for k in ('name','tops','speed_vs_exact','rel_rms','seconds','exact_seconds')})" "$OUT/kvbench_$name.json" 2>&1 | tail -1; }
for v in io-pr-ts x-nd x-gall x-nd-gall x-nd-g8 io-pr-ts; do k "${v}_32768" 32768 $v --repeat 5; done
for v in io-pr-ts x-nd x-nd-gall x-gall x-nd-g8 io-pr-ts; do k "${v}_217088" 217088 $v --repeat 3; done
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
(cd "$OUT" && tar czf s43_call1_results.tgz --remove-files ./*.json ./*.txt smi.csv.gz)
ls -la "$OUT"
