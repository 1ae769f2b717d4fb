#!/usr/bin/env bash
# End-to-end check of the ComfyUI node pack (integrations/comfyui) in a real ComfyUI
# checkout with the MiniMax-H3 model. One command on the GPU machine:
#
#   bash scripts/comfyui-e2e.sh .ext/ComfyUI            # int8 and bf16, report in $OUT
#   bash scripts/comfyui-e2e.sh .ext/ComfyUI int8,bf16,w4a8 --cpu --quick   # a CPU run here
#
# What it needs (nothing is fetched; docs/COMFYUI.md "End-to-end check"):
#   - the ComfyUI checkout (git-ignored .ext/ComfyUI; scripts/comfyui-e2e-prepare.sh makes a
#     slim copy from the fetched snapshot);
#   - ComfyUI's import-time dependencies that the machine lacks, as wheels in .whl/
#     (comfy-kitchen, comfy-aimdo, torchsde, trampoline; the prepare script fetches them);
#   - the h3stream module: importable already, or a wheel in .whl/ (built with CUDA for the
#     GPU run), or buildable here with `pip install .`.
# Writes $OUT/comfyui-e2e.{md,json} and the memory probe's JSONL/HTML; exit 0 = PASS.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
comfy=${1:?usage: comfyui-e2e.sh COMFYUI_DIR [formats] [--cpu] [--quick] [extra args]}
formats=${2:-int8,bf16}
shift $(( $# >= 2 ? 2 : 1 ))
OUT=${OUT:-$PWD/out/comfyui-e2e}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONDONTWRITEBYTECODE=1

if ! "$PY" -c "import comfy_kitchen, comfy_aimdo, torchsde" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
  site=${H3S_E2E_SITE:-/tmp/h3s-e2e-site}
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl || { echo "comfyui-e2e: installing .whl/ failed"; exit 2; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! "$PY" -c "import h3stream" 2>/dev/null; then
  echo "comfyui-e2e: h3stream not importable; building it with pip install . (needs the packages of scripts/setup-deps.sh)"
  "$PY" -m pip install -q --no-build-isolation --no-deps . 2>&1 | tail -n 20
  "$PY" -c "import h3stream" || { echo "comfyui-e2e: h3stream still not importable"; exit 2; }
fi
"$PY" -c "import h3stream, torch; print('h3stream', h3stream.__version__, 'cuda', h3stream.has_cuda(), '| torch', torch.__version__, 'cuda', torch.cuda.is_available())"
"$PY" scripts/comfyui_e2e.py "$comfy" --formats "$formats" --out "$OUT" "$@" 2>&1 | tee "$OUT/comfyui-e2e.log"
exit "${PIPESTATUS[0]}"
