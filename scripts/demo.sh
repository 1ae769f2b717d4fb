#!/usr/bin/env bash
# Build h3stream from nothing and run the main job: `h3s demo` on the built-in
# tiny model (stock vs streamed forward, bit-equality, time and arena peak).
# Extra arguments go to `h3s demo` (try --help, --format int8, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_BUILD_TESTS=OFF -DH3S_BUILD_BENCH=OFF >/dev/null
cmake --build build --target h3s
./build/tools/h3s/h3s demo "$@"
