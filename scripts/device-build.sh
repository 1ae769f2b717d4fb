#!/usr/bin/env bash
# Build, here, everything the GPU machine runs: h3s and the GPU tests with the
# CUDA backend (sm_90a), linked portably (H3S_PORTABLE_BINARIES), copied to
# .devbin/ (git-ignored) which the device call carries. The device image has
# CUDA and PyTorch but none of our C++ dependencies, so we ship binaries.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON \
  -DH3S_PORTABLE_BINARIES=ON -DH3S_BUILD_BENCH=OFF >/dev/null
cmake --build build-dev --target h3s h3s_tests_gpu h3s_tests_exec
rm -rf .devbin && mkdir -p .devbin
cp build-dev/tools/h3s/h3s build-dev/tests/h3s_tests_gpu build-dev/tests/h3s_tests_exec .devbin/
strip .devbin/h3s .devbin/h3s_tests_gpu .devbin/h3s_tests_exec
du -sh .devbin
