#!/usr/bin/env bash
# Build h3stream from nothing and run every CPU test: the release suite, the
# same suite under AddressSanitizer + UndefinedBehaviorSanitizer, the style
# check, and a smoke run of the micro-benchmarks. Used by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
jobs=$(nproc)

echo "== style: clang-format =="
files=$(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' 2>/dev/null || find src tools tests bench -name '*.[ch]pp')
clang-format --dry-run --Werror $files

echo "== release build + tests =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== micro-benchmark smoke run =="
./build/bench/h3s_bench_cpu --benchmark_min_time=0.01 --benchmark_filter='Linear/int8/64|RmsNormMod'

echo "== ASan + UBSan build + tests =="
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DH3S_SANITIZE=ON \
  -DH3S_BUILD_BENCH=OFF >/dev/null
cmake --build build-sanitize -j "$jobs"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-sanitize --output-on-failure -j "$jobs"
