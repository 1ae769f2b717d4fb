#!/usr/bin/env bash
# Session 41, call 1, on whatever GPU comes: SageAttention-2's own Hopper kernel at H3's shape
# beside our kvi8s (same call, same clock log), then the issue's one-call set: kvi8s (gaussian,
# outlier), kvi8r, the int8 block with kvi8s and bf16 stores, both PyTorch anchors.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export H3S_REQUIRE_GPU=1
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,power.limit,clocks.max.sm --format=csv,noheader | tee "$OUT/gpu.txt"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv,noheader -lms 100 > "$OUT/smi.csv" &
SMI=$!
R="$OUT/runs.txt"
k() { local name=$1 tokens=$2; shift 2; local t0=$(date +%s.%N)
  timeout 120 .devbin/h3s kvbench --backend cuda --tokens "$tokens" --json --no-baseline "$@" > "$OUT/kvbench_$name.json" 2>> "$OUT/stderr.txt"
  echo "kvbench_$name rc=$? $t0 $(date +%s.%N)" | tee -a "$R"
  python3 -c "import json,sys; i=json.load(open(sys.argv[1]))['inputs'][0]; print({k: i.get(k) for k in ('name','tops','speed_vs_exact','rel_rms','seconds','exact_seconds')})" "$OUT/kvbench_$name.json" 2>&1 | tail -1; }
sg() { local name=$1; shift; local t0=$(date +%s.%N)
  timeout 90 .ext/sage2/sage2_bench "$@" > "$OUT/$name.jsonl" 2>> "$OUT/stderr.txt"
  echo "$name rc=$? $t0 $(date +%s.%N)" | tee -a "$R"; cat "$OUT/$name.jsonl"; }
sg sage2_217088 217088 56 3
k kvi8s_gaussian 217088 --kv-store kvi8s --inputs gaussian
sg sage2_217088_sagebench 217088 56 3 sagebench
sg sage2_32768 32768 56 5
sg sage2_32768_sagebench 32768 56 5 sagebench
k kvi8s_32768 32768 --kv-store kvi8s --inputs gaussian
for kv in kvi8s; do
  t0=$(date +%s.%N)
  timeout 150 .devbin/h3s bench --backend cuda --preset h3 --format int8 --token-list 217088 --json \
    --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384 --kv-store $kv --skip-attention \
    > "$OUT/block_$kv.json" 2>> "$OUT/stderr.txt"
  echo "block_$kv rc=$? $t0 $(date +%s.%N)" | tee -a "$R"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print({k: d.get(k) for k in ('streamed_s','stock_s','bit_equal','streamed_peak_gib')})" "$OUT/block_$kv.json" 2>&1 | tail -1
done
for a in FLASH_ATTENTION CUDNN_ATTENTION; do
  t0=$(date +%s.%N)
  timeout 200 env ATTN=$a python3 .ext/torch_h3_block.py 217088 > "$OUT/torch_$a.txt" 2>&1
  echo "torch_$a rc=$? $t0 $(date +%s.%N)" | tee -a "$R"; tail -1 "$OUT/torch_$a.txt"
done
kill $SMI
python3 - "$OUT" <<'PY'
import json, sys, glob, os
o = sys.argv[1]
for f in sorted(glob.glob(o + "/kvbench_*.json")):
    try:
        d = json.load(open(f))
        for i in d["inputs"]:
            print(os.path.basename(f), i.get("name"), "tops", i.get("tops"), "speed_vs_exact", i.get("speed_vs_exact"), "rel_rms", i.get("rel_rms"))
    except Exception as e:
        print(f, "unparsed", e)
for f in sorted(glob.glob(o + "/block_*.json")):
    try:
        d = json.load(open(f))
        print(os.path.basename(f), "streamed", d["streamed_s"], "stock", d["stock_s"], "bit_equal", d["bit_equal"], "peak", round(d["streamed_peak_gib"], 2))
    except Exception as e:
        print(f, "unparsed", e)
PY
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
# Few files come back: everything in one archive, the summaries on stdout above.
(cd "$OUT" && tar czf s41_call1_results.tgz --remove-files ./*.json ./*.jsonl ./*.txt smi.csv.gz)
ls -la "$OUT"
