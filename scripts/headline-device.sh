#!/usr/bin/env bash
# The headline, end to end, on the GPU machine (repo root): the full-size MiniMax-H3 (50 DiT
# blocks) sampled in a real ComfyUI behind a memory fence, for our node, its K/V tier, the
# node it replaces and stock ComfyUI. Carry `.ext .whl` (scripts/headline/prepare.sh makes
# them here). One device call runs at most 10 minutes: pick the parts with STEPS.
#
#   STEPS=setup,checkpoint,smoke,ours,stock bash scripts/headline-device.sh
#   STEPS=setup,ours_unfenced,kvi8s,report bash scripts/headline-device.sh      # next call
#   OURS_STEPS=1 KVI8S_STEPS=1 STEPS=setup,checkpoint,ours,kvi8s,report bash scripts/headline-device.sh
#     (kvi8s' rel-rms needs the exact latent of the same steps on the same machine: the
#     latents, ~80 MB each, stay on the machine; one step each fits a call beside the fence's)
# Sampler steps: SAMPLER_STEPS (2) for every run, or per part OURS_STEPS, KVI8S_STEPS,
# REFERENCE_STEPS, STOCK_STEPS (1), FENCE15_STEPS (1).
#
# Parts, run in the order STEPS names them (each with its own time limit; a part that fails or overruns is named at the end and
# the script exits 1, the other parts still run):
#   setup          the wheels into a private folder; imports, GPU, driver, disk, cgroup checked
#   checkpoint     .headline/h3_$FORMAT.safetensors: 50 blocks in ComfyUI's format and key names,
#                  full time form, codes and scales drawn directly (timing does not depend on
#                  the values), streamed to disk block by block (~0.91 GB a block int8, ~46 GB);
#                  kept while the machine is warm; one format at a time (the disk is 64 GiB)
#   smoke          ours at 124 frames, one step, no fence: the whole path, in seconds
#   ours           our node, defaults (exact store), behind the 15.4 GiB fence
#   ours_unfenced  the same without a fence: the bits the fenced runs must equal
#   kvi8s          our node with kv_store kvi8s behind the fence
#   reference      the reimplemented node (ComfyUI-MAINodes vram_lab.py at 78c1ad2), defaults,
#                  behind the fence
#   stock          ComfyUI with no chunking node behind the fence (an out-of-memory is a result;
#                  STOCK_STEPS, default 1: its outcome is the first step's)
#   ours_15.0      our node behind a 15.0 GiB fence (where the reference's exact store ran out;
#                  FENCE15_STEPS, default 1: the outcome, in half the device time of two steps)
#   report         bits and rel-rms between the runs' latents, ratios to the reference
# The fence (scripts/headline/fence.py) is a second process that takes device memory until
# FENCE_GIB (15.4) GiB are free, as the reference's own measurement did on a 96 GB card.
# ComfyUI runs under a 32 GiB cgroup (memory.max) where the machine allows it; otherwise the
# record says so and the host peak is the process's anonymous + shared RSS.
# Output under $OUT (a device call brings back at most 8 files): headline.jsonl (one record a
# run), fences.jsonl, headline.log (every part's output, headed by its name), steps.txt,
# report.json, report.md. Latents stay in .headline/latents between calls.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
comfy=${1:-.ext/ComfyUI}
OUT=${OUT:-$PWD/out/headline}
STEPS=${STEPS:-setup,checkpoint,smoke,ours,stock}
FORMAT=${FORMAT:-int8}
FENCE_GIB=${FENCE_GIB:-15.4}
HOST_LIMIT=${HOST_LIMIT:-32G}
# ComfyUI sizes its pinned memory from the machine's RAM: run.py makes it see this much
MACHINE_RAM_GIB=${MACHINE_RAM_GIB:-32}
FRAMES=${FRAMES:-702} WIDTH=${WIDTH:-1376} HEIGHT=${HEIGHT:-768} SAMPLER_STEPS=${SAMPLER_STEPS:-2}
work=$PWD/.headline
ckpt=$work/h3_$FORMAT.safetensors
PY=${PYTHON:-python3}
mkdir -p "$OUT" "$work/latents"
export PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
log=$OUT/headline.log
failed=()

part() {  # part NAME SECONDS CMD...: run with a limit, output to the log
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s) ==" | tee -a "$log"
  local t0=$SECONDS
  # (functions run under timeout through bash -c: they and the variables are exported)
  timeout --kill-after=10 "$limit" bash -c '"$@"' part "$@" 2>&1 | tee -a "$log" |
    grep --line-buffered -E '^(headline|fence|h3s|checkpoint|setup|report|Traceback|[A-Za-z]*Error)'
  local rc=${PIPESTATUS[0]}
  # nothing of a part outlives it: a fence left standing would shrink the next part's card
  pkill -f scripts/headline/fence.py 2>/dev/null; pkill -f scripts/headline/run.py 2>/dev/null
  sleep 1
  echo "$name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/steps.txt" "$log"
  [ "$rc" -eq 0 ] || failed+=("$name (rc $rc)")
}
want() { [[ ",$STEPS," == *",$1,"* ]]; }

site=/tmp/h3s-headline-site
setup() {
  if compgen -G ".whl/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$site" .whl/*.whl || { echo "setup: installing .whl/ failed"; return 2; }
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader | sed 's/^/setup: gpu /'
  df -h "$work" | tail -n 1 | sed 's/^/setup: disk /'
  free -g | sed -n 2p | sed 's/^/setup: host memory (GiB) /'
  PYTHONPATH="$site" "$PY" - <<'EOF'
import h3stream, torch, comfy_aimdo, comfy_kitchen
print(f"setup: h3stream {h3stream.__version__} cuda {h3stream.has_cuda()}, torch {torch.__version__}, "
      f"comfy-aimdo, comfy-kitchen importable")
assert h3stream.has_cuda(), "the h3stream wheel has no CUDA backend or sees no GPU"
EOF
}
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

checkpoint() {
  if [ -f "$ckpt" ]; then echo "checkpoint: $ckpt already here ($(du -h "$ckpt" | cut -f1))"; return 0; fi
  for other in "$work"/h3_*.safetensors "$work"/*.part; do  # one format at a time
    [ -e "$other" ] && { echo "checkpoint: removing $other (the disk holds one format)"; rm -f "$other"; }
  done
  "$PY" - "$ckpt" "$FORMAT" <<'EOF'
import os, sys, time, h3stream
path, fmt = sys.argv[1:3]
t0 = time.perf_counter()
h3stream.make_checkpoint(path, preset="h3", format=fmt, weights="drawn")
dt = time.perf_counter() - t0
size = os.path.getsize(path)
print(f"checkpoint: {path} {size / 1e9:.1f} GB in {dt:.0f} s ({size / 1e9 / dt:.2f} GB/s)")
EOF
}

cgroup_note=""
# ComfyUI in a 32 GiB memory cgroup: a child of the root with memory.max, the process moved in.
in_cgroup() {
  local cg=/sys/fs/cgroup/h3s-headline
  if [ -z "$cgroup_note" ]; then
    if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers &&
       { grep -qw memory /sys/fs/cgroup/cgroup.subtree_control || echo +memory > /sys/fs/cgroup/cgroup.subtree_control; } 2>/dev/null &&
       mkdir -p "$cg" 2>/dev/null && echo "$HOST_LIMIT" > "$cg/memory.max" 2>/dev/null; then
      echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
      cgroup_note="ok"
    else
      cgroup_note="no cgroup v2 memory controller writable here"
    fi
    echo "headline: cgroup: $cgroup_note" | tee -a "$log"
  fi
  if [ "$cgroup_note" = ok ]; then
    # memory.peak is per cgroup: a fresh one per run
    rmdir "$cg" 2>/dev/null; mkdir -p "$cg" && echo "$HOST_LIMIT" > "$cg/memory.max"
    echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
    bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cg" "$@"
  else
    "$@"
  fi
}

run_node() {  # run_node NAME NODE FENCE_GIB|none [run.py args]
  local name=$1 node=$2 fence=$3
  shift 3
  local fpid="" ready=/tmp/h3s-fence-$name.ready frec=/tmp/h3s-fence-$name.json
  rm -f "$ready" "$frec"
  if [ "$fence" != none ]; then
    "$PY" scripts/headline/fence.py --free-gib "$fence" --ready "$ready" --record "$frec" &
    fpid=$!
    for _ in $(seq 600); do [ -f "$ready" ] && break; kill -0 $fpid 2>/dev/null || break; sleep 0.1; done
    if [ ! -f "$ready" ]; then echo "headline: the $fence GiB fence did not stand"; kill $fpid 2>/dev/null; return 3; fi
  fi
  local fence_arg=()
  [ "$fence" != none ] && fence_arg=(--fence-free-gib "$fence")
  in_cgroup "$PY" scripts/headline/run.py "$comfy" --node "$node" --name "$name" --checkpoint "$ckpt" \
    --format "$FORMAT" --machine-ram-gib "$MACHINE_RAM_GIB" \
    --frames "$FRAMES" --width "$WIDTH" --height "$HEIGHT" --steps "$SAMPLER_STEPS" \
    --latent-dir "$work/latents" --out "$OUT" --history "$work/headline-all.jsonl" \
    "${fence_arg[@]}" "$@"
  local rc=$?
  if [ -n "$fpid" ]; then
    kill -TERM $fpid 2>/dev/null; wait $fpid 2>/dev/null
    "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); r['run']=sys.argv[2]; print(json.dumps(r))" \
      "$frec" "$name" >> "$OUT/fences.jsonl" 2>/dev/null
  fi
  return $rc
}

export -f setup checkpoint in_cgroup run_node
export comfy OUT FORMAT FENCE_GIB HOST_LIMIT MACHINE_RAM_GIB FRAMES WIDTH HEIGHT SAMPLER_STEPS work ckpt PY log site
# Parts run in the order STEPS names them (one may come twice, e.g. report after each run).
IFS=, read -ra parts <<<"$STEPS"
for p in "${parts[@]}"; do
  case $p in
    setup) part setup 120 setup ;;
    checkpoint) part checkpoint 560 checkpoint ;;
    *) [ -f "$ckpt" ] || [ "$p" = report ] ||
         { echo "headline: no checkpoint $ckpt (STEPS needs checkpoint first)" | tee -a "$log"; } ;;&
    smoke) part smoke 240 run_node smoke ours none --frames 124 --steps 1 ;;
    ours) part ours 570 run_node ours ours "$FENCE_GIB" --steps "${OURS_STEPS:-$SAMPLER_STEPS}" ;;
    stock) part stock 300 run_node stock stock "$FENCE_GIB" --steps "${STOCK_STEPS:-1}" ;;
    ours_unfenced) part ours_unfenced 570 run_node ours_unfenced ours none ;;
    kvi8s) part kvi8s 540 run_node ours_kvi8s ours_kvi8s "$FENCE_GIB" --steps "${KVI8S_STEPS:-$SAMPLER_STEPS}" ;;
    # REFERENCE_STEPS (default SAMPLER_STEPS): its record claims 316 s a step, two may not fit a call
    reference) part reference "${REFERENCE_LIMIT:-590}" run_node reference reference "$FENCE_GIB" \
                 --steps "${REFERENCE_STEPS:-$SAMPLER_STEPS}" ;;
    ours_15.0) part ours_15.0 570 run_node ours_15.0 ours 15.0 --steps "${FENCE15_STEPS:-1}" ;;
    report) part report 120 "$PY" scripts/headline/report.py "$work/headline-all.jsonl" --out "$OUT" ;;
    *) echo "headline: unknown part '$p' in STEPS" | tee -a "$log"; failed+=("$p (unknown)") ;;
  esac
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "headline-device: FAILED parts: ${failed[*]}" | tee -a "$log"
  exit 1
fi
echo "headline-device: all parts passed ($STEPS)" | tee -a "$log"
