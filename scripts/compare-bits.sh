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
mkdir -p "$work"
hash_of() {  # hash_of H3S FLAGS...: the output hash of one forward, or "failed"
  local bin=$1
  shift
  "$bin" forward --backend "$backend" --output "$work/out.safetensors" --json "$@" 2>/dev/null |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["output_hash"])' 2>/dev/null ||
    echo failed
}
bad=0
echo "compare-bits: $(basename "$old") vs $(basename "$new"), preset ${PRESET:-h3} 1 block, backend $backend${CUDA_FORCE_PTX_JIT:+, CUDA_FORCE_PTX_JIT=$CUDA_FORCE_PTX_JIT}" | tee "$work/summary.txt"
for f in ${formats//,/ }; do
  ck=$work/ck_$f.safetensors
  in=$work/in_$f.safetensors
  "$new" make-checkpoint --preset "${PRESET:-h3}" --blocks 1 --format "$f" "$ck" >/dev/null 2>&1 &&
    "$new" make-inputs --checkpoint "$ck" --output "$in" --latent-t "$lt" --latent-h "$lh" \
      --latent-w "$lw" >/dev/null 2>&1 || { echo "$f: no checkpoint or inputs"; bad=1; continue; }
  for t in ${tiers//,/ }; do
    for mode in streamed stock; do
      flags=(--checkpoint "$ck" --inputs "$in" --kv-store "$t")
      if [ "$mode" = stock ]; then
        flags+=(--stock)
      else
        flags+=(--min-tokens 0 --q-chunk 4099 --kv-chunk 5003 --mlp-chunk 3001)
      fi
      a=$(hash_of "$old" "${flags[@]}")
      b=$(hash_of "$new" "${flags[@]}")
      verdict=same
      if [ "$a" = failed ] || [ "$a" != "$b" ]; then
        verdict=DIFFER
        bad=1
      fi
      echo "$f $t $mode: old $a new $b $verdict" | tee -a "$work/summary.txt"
    done
  done
done
[ "$bad" = 0 ] && echo "compare-bits: every run gave the same bits" | tee -a "$work/summary.txt"
exit "$bad"
