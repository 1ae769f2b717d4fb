#!/usr/bin/env bash
# session 32 call 1 (temporary): the Hopper image under session 31's defaults (kvfp4s by its
# decode path): the whole GPU suite; kvbench (gaussian) kvfp4s, kvmix, kvfp4s with 16384-key
# decode blocks; the int8 block per store (bf16, kvi8s, kvfp4s, kvfp4s 16384, kvmix, kvi8r);
# the PyTorch anchor (flash, cuDNN).
export OUT_REAL=$OUT OUT=/tmp/o; mkdir -p $OUT
save() { tar czf $OUT_REAL/out.tgz -C /tmp o; }
b=.devbin
export H3S_REQUIRE_GPU=1
st() { local n=$1 l=$2; shift 2; local t0=$SECONDS; timeout $l "$@" > $OUT/$n.txt 2>&1; echo "$n rc=$? $((SECONDS-t0))s" | tee -a $OUT/steps.txt; save; }
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit --format=csv,noheader | tee $OUT/gpu.txt
st gpu_tests 200 $b/h3s_tests_gpu --gtest_output=json:$OUT/gpu_tests.json
grep -E "PASSED|FAILED|SKIPPED" $OUT/gpu_tests.txt | tail -5
kb="--backend cuda --tokens 217088 --no-baseline --inputs gaussian --json"
st kvbench_kvfp4s 120 $b/h3s kvbench --kv-store kvfp4s $kb
st kvbench_kvmix 120 $b/h3s kvbench --kv-store kvmix $kb
st kvbench_kvfp4s_decode16384 120 env H3S_KVFP4S_DECODE_KEYS=16384 $b/h3s kvbench --kv-store kvfp4s $kb
bb="bench --backend cuda --preset h3 --format int8 --token-list 217088 --json --q-chunk 16384 --kv-chunk 16384 --mlp-chunk 16384 --skip-attention"
for kv in bf16 kvi8s kvfp4s kvmix kvi8r; do st bench_int8_$kv 120 $b/h3s $bb --kv-store $kv; done
st bench_int8_kvfp4s_decode16384 120 env H3S_KVFP4S_DECODE_KEYS=16384 $b/h3s $bb --kv-store kvfp4s
st torch_block_flash 150 env ATTN=FLASH_ATTENTION python3 .ext/torch_h3_block.py 217088
st torch_block_cudnn 150 env ATTN=CUDNN_ATTENTION python3 .ext/torch_h3_block.py 217088
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob('/tmp/o/*.txt')):
    n = os.path.basename(f)
    if not (n.startswith('kvbench') or n.startswith('bench_') or n.startswith('torch')): continue
    for line in open(f):
        line = line.strip()
        if not line.startswith('{'): continue
        try: r = json.loads(line)
        except Exception: continue
        if n.startswith('kvbench'):
            for i in r.get('inputs', []):
                print(n, i.get('name'), 'tops', i.get('tops'), 's', i.get('seconds'), 'exact', i.get('exact_seconds'), 'ratio', i.get('time_vs_exact'), 'rel', i.get('rel_rms'), r.get('tier_kernel'))
        else:
            print(n, {k: r.get(k) for k in ('streamed_s','stock_s','bit_equal','streamed_peak_gib','rel_rms_vs_exact','attn_kernel','kv_store','attn_backend','attn_tflops','stock_peak_gib')})
PY
