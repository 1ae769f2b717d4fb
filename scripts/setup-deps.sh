#!/usr/bin/env bash
# Installs the Debian packages h3stream builds and tests with (idempotent).
# Why each: cmake/ninja/g++ build; googletest + benchmark for tests and
# micro-benchmarks; nlohmann-json (JSON output and safetensors headers),
# CLI11 (the h3s command line), fmt (formatting); clang-format for the style
# check; python3 for the small helper scripts; clang + libclang-rt-14-dev
# (libFuzzer and the sanitizer runtimes) for the fuzz target (scripts/fuzz.sh).
set -euo pipefail
packages=(cmake ninja-build g++ libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev
          libcli11-dev libfmt-dev clang-format python3 clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "setup-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
