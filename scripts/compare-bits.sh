#!/usr/bin/env bash
# Two builds of h3s, the same bits? Runs `h3s forward` with each over the same synthetic
# 1-block full-width checkpoints (--preset h3 --blocks 1, seeded weights) and inputs, for every weight format and K/V tier, streamed (prime chunks, every
# block streamed) and stock, and compares the output hashes (`h3s forward --json`'s
# output_hash: equal hashes, equal bits). For a change that must keep the default kernels'
# bits, e.g. the kernel_choice.hpp change of 2026-12-06 (OLD: the binaries of 7722032, NEW:
# the change's); on the GPU machine, from the repo root. Prints one line a run, exits 1 when
# any hash differs or a run fails.
#   usage: bash scripts/compare-bits.sh OLD_H3S NEW_H3S [formats] [tiers]
#   env:   BACKEND (cuda), LATENT ("17 48 86": latent frames, height, width; ~18k tokens),
#          OUT (/tmp/h3s-out: the files go to $OUT/compare-bits), PRESET (h3; tiny for a
#          quick CPU run). The compute_80 PTX path: run it again with CUDA_FORCE_PTX_JIT=1
#          in the environment (process-wide, so each h3s process loads the PTX).
set -uo pipefail
old=${1:?usage: compare-bits.sh OLD_H3S NEW_H3S [formats] [tiers]}
new=${2:?usage: compare-bits.sh OLD_H3S NEW_H3S [formats] [tiers]}
formats=${3:-bf16,int8,w4a8,nvfp4}
tiers=${4:-bf16,kvi8r,kvi8s,kvfp4s,kvmix}
backend=${BACKEND:-cuda}
read -r lt lh lw <<<"${LATENT:-17 48 86}"
work=${OUT:-/tmp/h3s-out}/compare-bits
# Checkpoints and inputs (~1 GB a format at full width) outside $OUT, which a device call
# brings back; kept, so a second pass (the PTX path) reuses them.
data=${COMPARE_DATA:-/tmp/h3s-compare-bits}
mkdir -p "$work" "$data"
hash_of() {  # hash_of H3S OUTFILE FLAGS...: the output hash of one forward, or "failed"
  local bin=$1 out=$2
  shift 2
  "$bin" forward --backend "$backend" --output "$out" --json "$@" 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["output_hash"])' 2>/dev/null ||
    echo failed
}
one_format() {  # one_format F: every tier and mode of format F, a line each, to $work/F.txt
  local f=$1
  local ck=$data/ck_$f.safetensors in=$data/in_$f.safetensors
  if [ ! -f "$in" ]; then
    "$new" make-checkpoint --preset "${PRESET:-h3}" --blocks 1 --format "$f" "$ck" >/dev/null 2>&1 &&
      "$new" make-inputs --checkpoint "$ck" --output "$in" --latent-t "$lt" --latent-h "$lh" \
        --latent-w "$lw" >/dev/null 2>&1 || { rm -f "$in"; echo "$f: no checkpoint or inputs DIFFER"; return; }
  fi
  for t in ${tiers//,/ }; do
    for mode in streamed stock; do
      local flags=(--checkpoint "$ck" --inputs "$in" --kv-store "$t")
      if [ "$mode" = stock ]; then
        flags+=(--stock)
      else
        flags+=(--min-tokens 0 --q-chunk 4099 --kv-chunk 5003 --mlp-chunk 3001)
      fi
      local a b verdict=same
      a=$(hash_of "$old" "$data/out_$f.old.safetensors" "${flags[@]}")
      b=$(hash_of "$new" "$data/out_$f.new.safetensors" "${flags[@]}")
      [ "$a" = failed ] || [ "$a" != "$b" ] && verdict=DIFFER
      echo "$f $t $mode: old $a new $b $verdict"
    done
  done
}
echo "compare-bits: $(basename "$old") vs $(basename "$new"), preset ${PRESET:-h3} 1 block, backend $backend${CUDA_FORCE_PTX_JIT:+, CUDA_FORCE_PTX_JIT=$CUDA_FORCE_PTX_JIT}" | tee "$work/summary.txt"
# The formats side by side (JOBS at a time, default all: each process holds ~2 GB on the
# device and the runs are short, so the device is shared, not contended for bits)
jobs_max=${JOBS:-8}
for f in ${formats//,/ }; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do sleep 0.2; done
  one_format "$f" >"$work/$f.txt" 2>&1 &
done
wait
for f in ${formats//,/ }; do cat "$work/$f.txt"; done | tee -a "$work/summary.txt"
if grep -q DIFFER "$work/summary.txt" || [ "$(grep -c ': old ' "$work/summary.txt")" -eq 0 ]; then
  echo "compare-bits: bits differ or a run failed" | tee -a "$work/summary.txt"
  exit 1
fi
echo "compare-bits: every run gave the same bits" | tee -a "$work/summary.txt"
