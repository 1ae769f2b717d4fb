#!/usr/bin/env bash
# Build, here, everything the GPU machine runs: h3s and the GPU tests with the
# CUDA backend (sm_90a), linked portably (H3S_PORTABLE_BINARIES), copied to
# .devbin/ (git-ignored) which the device call carries. The device image has
# CUDA and PyTorch but none of our C++ dependencies, so we ship binaries (carry
# .devbin.tgz: the unpacked binaries and the tracked tree together pass the 64 MiB carry).
#   usage: bash scripts/device-build.sh [--wheel]
# --wheel also builds the CUDA h3stream wheel for the device's CPython ($DEVICE_PY,
# 3.12 there; found as pythonX.Y or under pyenv) into .whl/, for the Python tests
# that scripts/device-check.sh runs on the GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
# Gone before the build, so a failed build leaves nothing stale for a device call to carry
# (on 2026-12-05 a device call ran old binaries after a build had failed on spills).
rm -rf .devbin
cmake -S . -B build-dev -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_CUDA=ON \
  -DH3S_PORTABLE_BINARIES=ON -DH3S_BUILD_BENCH=OFF >/dev/null
cmake --build build-dev --target h3s h3s_tests_gpu h3s_tests_exec
mkdir -p .devbin
cp build-dev/tools/h3s/h3s build-dev/tests/h3s_tests_gpu build-dev/tests/h3s_tests_exec .devbin/
strip .devbin/h3s .devbin/h3s_tests_gpu .devbin/h3s_tests_exec
# The device call carries at most 64 MiB with the tracked tree, and the three binaries are
# ~51 MB: carry .devbin.tgz (~14 MB), which device-check.sh unpacks.
tar -czf .devbin.tgz -C .devbin .
du -sh .devbin .devbin.tgz
if [ "${1:-}" = --wheel ]; then
  DEVICE_PY=${DEVICE_PY:-3.12}
  py=$(command -v "python$DEVICE_PY" || true)
  # (a pyenv shim is on PATH even when that version is not the selected one)
  if [ -n "$py" ] && ! "$py" --version >/dev/null 2>&1; then py=""; fi
  if [ -z "$py" ] && command -v pyenv >/dev/null; then
    v=$(pyenv versions --bare | grep -E "^$DEVICE_PY(\.|$)" | tail -n 1)
    [ -n "$v" ] && py="$(pyenv root)/versions/$v/bin/python$DEVICE_PY"
  fi
  [ -x "$py" ] || { echo "device-build: no python$DEVICE_PY here for the device wheel"; exit 2; }
  mkdir -p .whl
  rm -f .whl/h3stream-*.whl
  "$py" -m pip wheel -q --no-deps . -w .whl/ -C cmake.define.H3S_CUDA=ON \
    -C build-dir="build-wheel-$DEVICE_PY"
  ls -l .whl/h3stream-*.whl
fi
