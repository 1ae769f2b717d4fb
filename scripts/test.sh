#!/usr/bin/env bash
# Build h3stream from nothing and run every CPU test (the CUDA backend and its
# GPU tests are compiled when nvcc is present; without a GPU they skip): the release suite,
# with nvcc the off-Hopper kernels' resources per image (scripts/kernel-resources.sh),
# `cmake --install` and the example consumer (examples/embed) built against it, the
# same suite under AddressSanitizer + UndefinedBehaviorSanitizer, the style
# check, the docs check (tests/docs), a smoke run of the micro-benchmarks, a 30 s
# libFuzzer smoke run of the checkpoint parsers (scripts/fuzz.sh), the Python
# package: `pip install .` then pytest (scripts/python-test.sh), and the CPU wheel
# (scripts/build-wheel.sh --cpu). Used by CI (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-deps.sh
jobs=$(nproc)
# Each phase's start, in seconds from here (CI's limit is 60 minutes on 2 cores).
phase() { echo "== $1 (at ${SECONDS} s) =="; }

phase "style: clang-format"
# bench/results/experiments holds one-off experiment sources kept as records (never built):
# not checked.
files=$(git ls-files '*.cpp' '*.hpp' '*.h' '*.cu' '*.cuh' ':(exclude)bench/results/experiments/*' 2>/dev/null ||
  find src tools tests bench -name '*.[ch]pp' -not -path 'bench/results/*')
clang-format --dry-run --Werror $files

phase "docs: the architecture map and what the docs cite (tests/docs)"
# Plain Python, no build needed: the map's folders exist and name every src/ folder, cited
# result files exist, no internal run numbers outside bench/results.
python3 tests/docs/test_docs.py

phase "release build + tests"
# Test-only Python deps for the safetensors interop test (ctest python_safetensors_interop).
if [ ! -x build/pyenv/bin/python ]; then
  python3 -m venv build/pyenv || { rm -rf build/pyenv && apt-get install -y -q python3-venv >/dev/null &&
    python3 -m venv build/pyenv; }
fi
build/pyenv/bin/pip install -q safetensors numpy
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DH3S_PYTHON="$PWD/build/pyenv/bin/python" >/dev/null
cmake --build build -j "$jobs"
ctest --test-dir build --output-on-failure -j "$jobs"

# Where the release build found nvcc: every off-Hopper kernel's registers, spills and static
# shared memory per image of the release wheel (sm_80/86/89/120), from ptxas's report; fails
# past the limits an RTX card sets (~80 s on 2 cores the first time, reports cached in
# build/kernel-resources).
nvcc_path=$(sed -n 's/^CMAKE_CUDA_COMPILER:[A-Z]*=//p' build/CMakeCache.txt)
if [ -n "$nvcc_path" ] && [ -x "$nvcc_path" ]; then
  phase "kernel resources off Hopper (scripts/kernel-resources.sh)"
  PATH="$(dirname "$nvcc_path"):$PATH" H3S_JOBS="$jobs" bash scripts/kernel-resources.sh
fi

phase "cmake --install + the example consumer (examples/embed) against it"
rm -rf build/install build/embed
cmake --install build --prefix "$PWD/build/install" >/dev/null
cmake -S examples/embed -B build/embed -G Ninja -DCMAKE_PREFIX_PATH="$PWD/build/install" >/dev/null
cmake --build build/embed
build/install/bin/h3s make-checkpoint --preset tiny --format int8 build/embed/tiny.safetensors
build/install/bin/h3s make-inputs --checkpoint build/embed/tiny.safetensors \
  --output build/embed/inputs.safetensors --cond-frames 1 --latent-w 7
build/embed/h3s_embed build/embed/tiny.safetensors build/embed/inputs.safetensors \
  build/embed/outputs.safetensors

phase "micro-benchmark smoke run"
./build/bench/h3s_bench_cpu --benchmark_min_time=0.01 --benchmark_filter='Linear/int8/64|RmsNormMod'

phase "ASan + UBSan build + tests"
# (The CUDA backend is compiled once, in the release build above.)
# -O1 and line tables only (-g1): the reports keep file and line; the build takes half
# the time of -O2 -g (weight_feed.cpp: 84 s -> 43 s at -O2 -g1, another 29% off at -O1), and
# the tests run as fast, their hot loops being the CPU backend's, -O3 under the sanitizers
# (src/CMakeLists.txt).
cmake -S . -B build-sanitize -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DH3S_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DH3S_BUILD_BENCH=OFF -DH3S_CUDA=OFF >/dev/null
cmake --build build-sanitize -j "$jobs"
# Every test but the seven longest under the sanitizers (~730 of ~2,250 test-seconds on 2
# slow cores): whole `h3s demo` / `run` forwards per format or store, the rank-parallel
# chunk sweep and the activation-estimate sweep. They run in the release suite above; the
# code they reach runs here through the smaller block, store, placement and CLI tests.
asan_skip='^(Cli\.DemoJsonReportsBitEqualAndLowerStreamedPeak|Cli\.RunWithAnApproximateTierIsLabelledAndDiffersFromTheExactStore|Cli\.ExactAvRowsBringTheAudioCloserToTheExactStore|Cli\.VramBudgetStreamsWeightsAndKeepsTheBits|Cli\.DemoTablePrintsEveryColumn|RankParallel\.ChunkedRanksEqualOneRankBitForBit|ActivationEstimate\.BoundsTheMeasuredPeak)$'
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-sanitize --output-on-failure -j "$jobs" -E "$asan_skip"

phase "fuzz smoke (30 s)"
bash scripts/fuzz.sh 30

phase "Python module: pip install . + pytest (tests/python)"
# A CPU-only wheel (H3S_PYTHON_CUDA=ON adds the CUDA backend): the CUDA code was
# compiled by the release build above.
bash scripts/python-test.sh

phase "the CPU wheel: scripts/build-wheel.sh --cpu (auditwheel, install into Python 3.12+)"
# The release wheel's path without CUDA (the fat CUDA build is too long for CI's 2 cores).
bash scripts/build-wheel.sh --cpu
# The repository as a node pack in ComfyUI's own loader, where a ComfyUI checkout and a
# Python with its requirements are here (the e2e set-up, docs/COMFYUI.md); a fresh clone
# has neither.
comfy=${H3S_COMFYUI:-.ext/ComfyUI}
comfy_py=${H3S_COMFYUI_PYTHON:-build-e2e/venv/bin/python}
if [ -d "$comfy" ] && [ -x "$comfy_py" ]; then
  "$comfy_py" scripts/comfyui_pack_load.py "$comfy"
else
  echo "comfyui-pack-load: skipped (no $comfy or $comfy_py; H3S_COMFYUI, H3S_COMFYUI_PYTHON)"
fi
phase "done"
