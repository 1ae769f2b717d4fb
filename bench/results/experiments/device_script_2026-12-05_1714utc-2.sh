#!/usr/bin/env bash
# session 32 call 2 (temporary): kvfp4s' 16384-key Hopper default: the whole GPU suite; the
# kvbench kvfp4s and kvmix (gaussian);
# the int8 block with kvfp4s and kvmix; h3s plan for kvfp4s.
export OUT_REAL=$OUT OUT=/tmp/o; mkdir -p $OUT
save() { tar czf $OUT_REAL/out.tgz -C /tmp o; }
b=.devbin
export H3S_REQUIRE_GPU=1
st() { local n=$1 l=$2; shift 2; local t0=$SECONDS; timeout $l "$@" > $OUT/$n.txt 2>&1; echo "$n rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt; save; }
st gpu_tests 200 $b/h3s_tests_gpu --gtest_output=json:$OUT/gpu_tests.json
grep -E "PASSED|FAILED|SKIPPED" $OUT/gpu_tests.txt | tail -5
kb="--backend cuda --tokens 217088 --no-baseline --inputs gaussian --json"
st kvbench_kvfp4s 120 $b/h3s kvbench --kv-store kvfp4s $kb
st kvbench_kvmix 120 $b/h3s kvbench --kv-store kvmix $kb
bb="bench --backend cuda --preset h3 --format int8 --token-list 217088 --json --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384 --skip-attention"
for kv in kvfp4s kvmix; do st bench_int8_$kv 120 $b/h3s $bb --kv-store $kv; done
st plan_kvfp4s 60 $b/h3s plan --json --tokens 217088 --kv-store kvfp4s
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob('/tmp/o/*.txt')):
    n = os.path.basename(f)
    for line in open(f):
        line = line.strip()
        if not line.startswith('{'): continue
        try: r = json.loads(line)
        except Exception: continue
        if n.startswith('kvbench'):
            for i in r.get('inputs', []):
                print(n, i.get('name'), 'tops', i.get('tops'), 's', i.get('seconds'), 'exact', i.get('exact_seconds'), 'ratio', i.get('time_vs_exact'), 'rel', i.get('rel_rms'), r.get('tier_kernel'))
        elif n.startswith('bench'):
            print(n, {k: r.get(k) for k in ('streamed_s','stock_s','bit_equal','streamed_peak_gib','predicted_streamed_peak_gib','rel_rms_vs_exact','kv_store')})
        else:
            print(n, line[:400])
PY
