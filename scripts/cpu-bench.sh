#!/usr/bin/env bash
# CPU reference numbers: `h3s demo --json` on the tiny model for every format,
# and the op micro-benchmarks. Results go to bench/results/cpu_*.json with the
# command that produced them. (GPU numbers come from the device scripts.)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target h3s h3s_bench_cpu >/dev/null
out=bench/results
mkdir -p "$out"
host="$(nproc) cores, $(uname -m)"
for f in bf16 int8 w4a8 nvfp4; do
  cmd="build/tools/h3s/h3s demo --format $f --json"
  $cmd | python3 -c "import json,sys; d=json.load(sys.stdin); d['cmd']='$cmd'; d['host']='$host'; print(json.dumps(d))" \
    > "$out/cpu_demo_tiny_$f.json"
  echo "$f: $(cat "$out/cpu_demo_tiny_$f.json" | head -c 200)..."
done
build/bench/h3s_bench_cpu --benchmark_min_time=0.2 --benchmark_format=json \
  --benchmark_out="$out/cpu_micro.json" --benchmark_out_format=json >/dev/null
echo "wrote $out/cpu_micro.json"
