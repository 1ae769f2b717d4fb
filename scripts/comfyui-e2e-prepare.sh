#!/usr/bin/env bash
# Runs HERE (with PyPI access), before scripts/comfyui-e2e.sh runs on the GPU machine.
# Makes the two git-ignored things the device call carries, small enough for its 64 MiB:
#   .ext/ComfyUI  a slim ComfyUI: the Python of comfy/, comfy_api/, comfy_execution/,
#                 comfy_config/, comfy_extras/nodes_minimax_h3.py and the top-level modules
#                 (no tokenizer data, no web UI, no API nodes, no tests), ~6 MiB, from a
#                 ComfyUI checkout or bare git repo
#                 that has comfy/ldm/minimax (the H3 model);
#   .whl/         wheels of what ComfyUI's model path imports and the device image lacks,
#                 for CPython $DEVICE_PY (3.12 there): comfy-kitchen 0.2.31 (its CUDA
#                 extension pruned to sm_90a SASS by scripts/prune-kitchen-wheel.py: 56 -> 17.5
#                 MiB), comfy-aimdo 0.4.13, torchsde 0.2.6, trampoline 0.1.2.
#   usage: bash scripts/comfyui-e2e-prepare.sh COMFYUI_CHECKOUT_OR_BARE_GIT_DIR
# The h3stream module for the GPU machine (a CUDA build for that Python) is not made here:
# put its wheel into .whl/ as well, or make it importable there another way.
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: comfyui-e2e-prepare.sh COMFYUI_CHECKOUT_OR_BARE_GIT_DIR}
DEVICE_PY=${DEVICE_PY:-3.12}
PY=${PYTHON:-python3}
dest=.ext/ComfyUI
keep='^(comfy|comfy_api|comfy_execution|comfy_config)/|^comfy_extras/nodes_minimax_h3\.py$|^[^/]+\.py$|^requirements\.txt$'
skip='tokenizer|/web/|\.(json|txt|model|bin|safetensors|gz)$'  # data files of text encoders etc.

rm -rf "$dest" && mkdir -p "$dest"
if [ -d "$src/objects" ] || [ -f "$src/HEAD" ] && [ ! -d "$src/comfy" ]; then
  # a bare repository (e.g. a fetched snapshot whose largest blobs are absent)
  "$PY" - "$src" "$dest" "$keep" "$skip" <<'EOF'
import os, re, subprocess, sys
git, dest, keep, skip = sys.argv[1:]
tree = subprocess.run(["git", f"--git-dir={git}", "ls-tree", "-r", "HEAD"], check=True,
                      capture_output=True, text=True).stdout
n = 0
for line in tree.splitlines():
    meta, path = line.split("\t", 1)
    mode, kind, sha = meta.split()
    if kind != "blob" or not re.search(keep, path) or (re.search(skip, path) and not path.endswith(".py")):
        continue
    blob = subprocess.run(["git", f"--git-dir={git}", "cat-file", "blob", sha], capture_output=True)
    if blob.returncode:
        print(f"  absent in the snapshot: {path}")
        continue
    p = os.path.join(dest, path)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(blob.stdout)
    n += 1
print(f"extracted {n} files")
EOF
else
  (cd "$src" && find . -type f | sed 's|^\./||') | grep -E "$keep" | grep -Ev "$skip" \
    | while read -r f; do mkdir -p "$dest/$(dirname "$f")"; cp "$src/$f" "$dest/$f"; done
  # the .py files the skip pattern must never drop
  (cd "$src" && find comfy comfy_api comfy_execution comfy_config comfy_extras/nodes_minimax_h3.py -name '*.py' 2>/dev/null) \
    | while read -r f; do mkdir -p "$dest/$(dirname "$f")"; cp "$src/$f" "$dest/$f"; done
fi
test -f "$dest/comfy/ldm/minimax/model.py" || { echo "no comfy/ldm/minimax/model.py in $src: not an H3 ComfyUI"; exit 1; }

mkdir -p .whl build-e2e/wheels
dl() { "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$DEVICE_PY" \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$1" "$2"; }
rm -f .whl/comfy_kitchen-*.whl .whl/comfy_aimdo-*.whl .whl/torchsde-*.whl .whl/trampoline-*.whl
dl build-e2e/wheels comfy-kitchen==0.2.31
"$PY" scripts/prune-kitchen-wheel.py \
  "$(ls build-e2e/wheels/comfy_kitchen-0.2.31-cp3*-abi3-*.whl 2>/dev/null || ls build-e2e/wheels/comfy_kitchen-0.2.31-*.whl | head -n 1)" .whl
for w in comfy-aimdo==0.4.13 torchsde==0.2.6 trampoline==0.1.2; do dl .whl "$w"; done
ls .whl/h3stream-*.whl >/dev/null 2>&1 || echo "note: no h3stream wheel in .whl/ (the GPU run needs one built with CUDA for CPython $DEVICE_PY)"
du -sh "$dest" .whl
