#!/usr/bin/env bash
# Fuzzes the safetensors header reader, checkpoint detection/loading (the
# file, the Python module's in-memory from_tensors / lazy / load_block routes)
# and the comfy_quant JSON parser with libFuzzer (fuzz/fuzz_checkpoint.cpp) for
# a fixed budget: scripts/fuzz.sh [SECONDS] (default 60). Exits non-zero on a
# finding; the crashing input is left in build-fuzz/findings/.
#
# Builds with clang in build-fuzz (ASan + UBSan + libFuzzer coverage), writes
# the seeds with h3s_fuzz_make_seeds, and keeps the grown corpus in
# build-fuzz/corpus between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
bash scripts/setup-deps.sh
jobs=$(nproc)

# Line tables only: findings keep file and line, the build is faster than with full -g.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG" -DH3S_FUZZ=ON -DH3S_BUILD_TESTS=OFF -DH3S_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j "$jobs" --target h3s_fuzz_checkpoint h3s_fuzz_make_seeds

mkdir -p build-fuzz/corpus build-fuzz/findings
./build-fuzz/fuzz/h3s_fuzz_make_seeds build-fuzz/seeds

# New inputs go to corpus/ (the first directory); seeds/ is read only.
# -max_len 256 KiB: the smallest complete model (seeds h3_full_*) is ~200 KiB.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ./build-fuzz/fuzz/h3s_fuzz_checkpoint build-fuzz/corpus build-fuzz/seeds \
  -dict=fuzz/checkpoint.dict -max_total_time="$seconds" -max_len=262144 -rss_limit_mb=2048 \
  -timeout=10 -artifact_prefix=build-fuzz/findings/ -print_final_stats=1
