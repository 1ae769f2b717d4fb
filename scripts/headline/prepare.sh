#!/usr/bin/env bash
# Runs HERE (PyPI reachable), before scripts/headline-device.sh runs on the GPU machine.
# Makes the git-ignored things the device call carries (carry: .ext .whl):
#   .ext/ComfyUI          a slim ComfyUI with the H3 model (scripts/comfyui-e2e-prepare.sh)
#   .ext/MAINodes/vram_lab.py   the node h3stream reimplements (matlowai/ComfyUI-MAINodes
#                         "H3 Streamed Blocks") at the commit its published figures name,
#                         78c1ad2; GPL-3.0, carried to the device, never committed
#   .whl/                 comfy-kitchen, comfy-aimdo, torchsde, trampoline and the CUDA
#                         h3stream wheel of this tree for CPython 3.12 (scripts/device-build.sh --wheel)
#   usage: bash scripts/headline/prepare.sh COMFYUI_DIR_OR_BARE_GIT MAINODES_DIR_OR_BARE_GIT
set -euo pipefail
cd "$(dirname "$0")/../.."
comfy=${1:?usage: prepare.sh COMFYUI_DIR_OR_BARE_GIT MAINODES_DIR_OR_BARE_GIT}
mainodes=${2:?usage: prepare.sh COMFYUI_DIR_OR_BARE_GIT MAINODES_DIR_OR_BARE_GIT}
REF_COMMIT=${REF_COMMIT:-78c1ad2}
bash scripts/comfyui-e2e-prepare.sh "$comfy"
mkdir -p .ext/MAINodes
if [ -d "$mainodes/.git" ]; then gitdir="$mainodes/.git"; else gitdir="$mainodes"; fi
git --git-dir="$gitdir" show "$REF_COMMIT:vram_lab.py" > .ext/MAINodes/vram_lab.py
echo "reference node: .ext/MAINodes/vram_lab.py at $REF_COMMIT ($(wc -l < .ext/MAINodes/vram_lab.py) lines)"
if [ "${SKIP_WHEEL:-0}" != 1 ]; then bash scripts/device-build.sh --wheel; fi
du -sh .ext .whl
