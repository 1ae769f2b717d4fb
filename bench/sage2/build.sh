#!/usr/bin/env bash
# Builds build/sage2/sage2_bench: SageAttention-2's own Hopper kernel (the one sageattn() runs on
# sm90) timed at H3's shape by bench/sage2/sage2_bench.cu, for the kvi8s comparison in
# docs/PERFORMANCE.md. SageAttention's source is read from a git checkout at a pinned commit and
# extracted under build/sage2/ (ignored): never committed. Not part of the product or of CI.
#   usage: bash bench/sage2/build.sh [SAGEATTENTION_GIT_DIR]
#     SAGEATTENTION_GIT_DIR: a clone (bare or not) of github.com/thu-ml/SageAttention holding
#     the pinned commit; without it, the script clones it (needs github.com).
set -euo pipefail
cd "$(dirname "$0")/../.."
commit=d1a57a546c3d395b1ffcbeecc66d81db76f3b4b5  # 2026-01-17, "Update README"
out=build/sage2
git_dir=${1:-}
if [ -z "$git_dir" ]; then
  git_dir=$out/clone
  [ -d "$git_dir" ] || git clone -q --bare https://github.com/thu-ml/SageAttention "$git_dir"
fi
rm -rf "$out/src" && mkdir -p "$out/src/shim/torch"
[ -d "$git_dir/.git" ] && git_dir=$git_dir/.git
git --git-dir="$(cd "$git_dir" && pwd)" archive "$commit" csrc LICENSE | tar -x -C "$out/src"
# The kernel without its PyTorch launchers: everything before the first torch::Tensor function.
kernel=$out/src/csrc/qattn/qk_int_sv_f8_cuda_sm90.cu
end=$(grep -n '^torch::Tensor qk_int8_sv_f8_accum_f32_attn_inst_buf(' "$kernel" | cut -d: -f1)
[ -n "$end" ] || { echo "build.sh: the launcher's line moved in $kernel; check the commit" >&2; exit 1; }
head -n $((end - 1)) "$kernel" > "$out/src/csrc/qattn/sm90_kernel_only.cuh"
echo '#pragma once' > "$out/src/shim/torch/extension.h"  # the kept headers include it, use none of it
nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I"$out/src/shim" -I"$out/src" \
  -diag-suppress 174 -Xptxas -v bench/sage2/sage2_bench.cu -o "$out/sage2_bench" -lcuda 2>&1 |
  grep -A2 "qk_int8_sv_f8_attn_kernel" | grep -E "registers|spill" || true
ls -la "$out/sage2_bench"
