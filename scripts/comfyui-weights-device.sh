#!/usr/bin/env bash
# Issue 10's measurements in the real ComfyUI, in one command on the GPU machine (repo root):
#
#   bash scripts/comfyui-weights-device.sh .ext/ComfyUI           # H200, under 8 minutes
#   PYTHON=build/py312/bin/python bash scripts/comfyui-weights-device.sh .ext/ComfyUI --cpu
#                                                                 # the same steps, tiny, on a CPU
#
# Carried: .ext/ComfyUI (slim ComfyUI with the H3 model) and .whl/ (comfy-kitchen, comfy-aimdo,
# torchsde, trampoline and the CUDA h3stream wheel of the current tree: the node passes
# Options(kv_placement=, vram_budget=), which an older wheel refuses; preflight checks it).
# Every step is scripts/comfyui_weights_bench.py in its own process (ComfyUI's memory flags are
# per process), on full-width (hidden 5376) 2-block checkpoints written first, all formats in
# parallel. Each step appends its JSON records to $OUT/weights-bench.jsonl; every step's output
# goes, headed by its name, to $OUT/weights-device.log, and its rc and seconds to
# $OUT/steps.txt (three files: a device call brings back at most 8). A step that fails or runs
# past its limit does not stop the others; the script exits 1 naming the failed steps.
#
# Steps, what each measures, and the "Done means" of issue 10 it answers:
#   legacy_w4a8     W4A8, ComfyUI offloading every weight (--novram --disable-dynamic-vram), 32k
#                   and 217k tokens: ComfyUI's block, the node's and h3stream's resident engine
#                   per block; node bit-equal to the resident engine on block 0; hand-over at
#                   1,024 tokens.  -> "weights offloaded by ComfyUI add <= 5% at 217k";
#                   "bit-equal to the resident engine in every mode".
#   dynamic_int8    int8 in ComfyUI's dynamic VRAM (comfy-aimdo) with --vram-headroom above the
#                   H200's memory, so no weight page stays in VRAM and every cast streams from
#                   pinned host memory (node_casts_block0 counts the casts that came from the
#                   host), 32k and 217k.  -> the same two, in dynamic mode.
#   lora_resident   int8 + a random rank-16 LoRA on every block linear, weights resident (patched
#   lora_legacy     into the weights at load) / offloaded (applied by ComfyUI at each cast) /
#   lora_dynamic    dynamic: node vs ComfyUI's patched block <= 1e-2 rel-rms, vs its unpatched
#                   block >= 0.1, path h3stream on every block (lora_pass).  -> the node takes
#                   ComfyUI's weights in every mode, LoRA included, without falling back.
#   trim_int8       int8 at 217k, trim_forward on vs off: torch peaks (forward, block loop),
#                   seconds, outputs bit-equal.  -> what trim_forward saves in ComfyUI.
#   handover_bf16   the hand-over alone at 1,024 tokens for bf16 and NVFP4 (int8 and W4A8 have it
#   handover_nvfp4  in the steps above).  -> "taking ComfyUI's tensors costs <= 0.1 s per block
#                   for every format".
#   legacy_nvfp4    NVFP4 offloaded by ComfyUI as legacy_w4a8 does it: the node uploads the packed
#                   arrays and decodes them on the device at each call.
# "Borrowed device weights add <= 1% at 217k and <= 3% at 32k" (resident) was measured with this
# bench before (docs/PERFORMANCE.md "Weights"); the resident runs here give its engine side.
#
# Expected time on the H200 (estimates from the CPU runs and the earlier device runs): wheels
# and preflight ~15 s; checkpoints, every format in parallel, int8 ~1.5 min (2 blocks built in
# parallel; ~100 s on a 2-core CPU here, NVFP4 ~150 s, bf16 and W4A8 between), then
# lora_resident, lora_legacy ~25 s each; legacy_w4a8 ~65 s (217k: ComfyUI 2 x 4.2 s, node and
# resident 2 x 3.7 s each, plus the bit-equality block); dynamic_int8 ~65 s; trim_int8 ~45 s
# (three 217k forwards); handover_bf16 ~25 s; handover_nvfp4 ~25 s; legacy_nvfp4 ~65 s;
# lora_dynamic ~25 s: about 8 minutes in all.
# STEPS=a,b runs only those steps, FORMATS="nvfp4 ..." writes only those checkpoints (a step
# whose checkpoint is not written does not run): one format's checks in a short call.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
comfy=${1:?usage: comfyui-weights-device.sh COMFYUI_DIR [--cpu]}
cpu=${2:-}
OUT=${OUT:-$PWD/out/comfyui-weights}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
log=$OUT/weights-device.log
failed=()
if [ "$cpu" = --cpu ]; then  # tiny model, a few hundred rows: the whole run in minutes here
  size=(--cpu --preset tiny --handover-tokens 128)
  short=(--dims "2,16,16,8,16")
  long=(--dims "2,16,16,8,16")
  both=(--dims "2,16,16,8,16")
else
  size=(--preset h3)
  short=(--tokens 32768)
  long=(--tokens 217088)
  both=(--tokens "32768,217088")
fi
# No step starts after $DEADLINE seconds: a run slower than planned drops its last steps
# (named as failed) rather than running past 8 minutes.
DEADLINE=${DEADLINE:-420}
STEPS=${STEPS:-}
FORMATS=${FORMATS:-int8 w4a8 bf16 nvfp4}
step() {  # step NAME SECONDS ARGS...: one bench process with a time limit
  local name=$1 limit=$2
  shift 2
  [ -z "$STEPS" ] || [[ ",$STEPS," == *",$name,"* ]] || return 0
  if [ "$SECONDS" -gt "$DEADLINE" ]; then
    echo "$name: not started, past ${DEADLINE} s" | tee -a "$OUT/steps.txt" "$log"
    failed+=("$name (not started)")
    return
  fi
  echo "== $name (limit ${limit}s) ==" | tee -a "$log"
  local t0=$SECONDS
  timeout "$limit" "$PY" scripts/comfyui_weights_bench.py "$comfy" --out "$OUT" "${size[@]}" \
    --blocks 2 "$@" 2>&1 | tee -a "$log" | grep -E '^\{|Error|error:' | tail -n 12
  local rc=${PIPESTATUS[0]}
  echo "$name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt" "$log"
  [ "$rc" -eq 0 ] || failed+=("$name (rc $rc)")
}

# -- the Python side: ComfyUI's dependencies and h3stream from .whl/ where they are missing
if ! "$PY" -c "import comfy_kitchen, comfy_aimdo, torchsde, h3stream" 2>/dev/null \
    && compgen -G ".whl/*.whl" >/dev/null; then
  site=${H3S_E2E_SITE:-/tmp/h3s-e2e-site}
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl || { echo "weights-device: installing .whl/ failed"; exit 2; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
# The node builds h3stream.Options with every control; a module older than its controls
# refuses them and every node step would fail: stop here instead.
if ! "$PY" - "$cpu" <<'EOF' 2>&1 | tee -a "$log"; then
import sys
import h3stream
import torch
print("h3stream", h3stream.__version__, "cuda", h3stream.has_cuda(), "| torch", torch.__version__,
      "cuda", torch.cuda.is_available())
h3stream.Options(kv_placement="auto", vram_budget=0)
if sys.argv[1] != "--cpu" and not (h3stream.has_cuda() and torch.cuda.is_available()):
    sys.exit("weights-device: no CUDA h3stream or no GPU (use --cpu for a CPU run)")
EOF
  echo "weights-device: preflight failed (an h3stream wheel older than the node? rebuild it with"
  echo "  bash scripts/device-build.sh --wheel)"
  exit 2
fi
[ "$cpu" = --cpu ] || nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader \
  | tee -a "$log"

# -- checkpoints: every format in parallel; each step waits only for its own format's file
declare -A writer written
t0=$SECONDS
for fmt in $FORMATS; do
  (
    timeout 420 "$PY" scripts/comfyui_weights_bench.py "$comfy" --prepare "${size[@]}" \
      --format "$fmt" --blocks 2 >>"$log" 2>&1
    rc=$?
    echo "checkpoint $fmt: rc=$rc, written by $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt" "$log"
    exit $rc
  ) &
  writer[$fmt]=$!
done
ready() {  # ready FORMAT: waits for that format's checkpoint; false when its writer failed
  local fmt=$1 rc=0
  [ -n "${writer[$fmt]:-}" ] || return 1  # not in FORMATS
  if [ -z "${written[$fmt]:-}" ]; then
    wait "${writer[$fmt]}" || rc=$?
    written[$fmt]=$rc
    [ "$rc" -eq 0 ] || failed+=("checkpoint $fmt (rc $rc)")
  fi
  return "${written[$fmt]}"
}

# The LoRA checks first (correctness, not timings): meanwhile the slower writers (NVFP4, bf16)
# finish, and the timed steps after them have the machine's cores to themselves.
if ready int8; then
  step lora_resident 120 --format int8 --lora 16 "${short[@]}"
  step lora_legacy 120 --format int8 --lora 16 --offload legacy "${short[@]}"
fi
ready w4a8 && step legacy_w4a8 180 --format w4a8 --offload legacy "${both[@]}"
if ready int8; then
  step dynamic_int8 180 --format int8 --offload dynamic "${both[@]}"
  step trim_int8 150 --format int8 --trim "${long[@]}"
fi
ready bf16 && step handover_bf16 120 --format bf16 --measure handover
ready nvfp4 && step handover_nvfp4 120 --format nvfp4 --measure handover
ready nvfp4 && step legacy_nvfp4 180 --format nvfp4 --offload legacy "${both[@]}"
ready int8 && step lora_dynamic 120 --format int8 --lora 16 --offload dynamic "${short[@]}"

if [ ${#failed[@]} -gt 0 ]; then
  printf 'weights-device: FAILED steps:' | tee -a "$OUT/steps.txt"
  printf ' [%s]' "${failed[@]}" | tee -a "$OUT/steps.txt"
  echo | tee -a "$OUT/steps.txt"
  exit 1
fi
echo "weights-device: every step passed in $SECONDS s" | tee -a "$OUT/steps.txt"
