#!/usr/bin/env bash
# SASS of a CUDA source, here, without a GPU: registers, spills, stack frame and the count of
# each chosen instruction per kernel and architecture, so a kernel change is checked
# (and predicted) before device time is spent on it. The CUDA toolkit image has nvcc
# and ptxas but no cuobjdump/nvdisasm: they come from their PyPI wheels
# (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into build/cuda-tools/ once.
#   usage: bash scripts/sass-check.sh FILE.cu [REGEX]
#     REGEX: the SASS opcodes to count (default: tensor-core MMAs, conversions and
#     global/shared memory ops), e.g. 'HMMA|HGMMA|IMMA|F2FP|STG|LDG'.
#   env:   SASS_ARCHS (default "sm_90a sm_80": Hopper's image and the mma.sync one; any
#          of the shipped sm_86, sm_89, sm_120 too). kernel-resources.sh checks every
#          shipped image's registers and shared memory against its limits.
#   e.g.   bash scripts/sass-check.sh src/backend/cuda/attention/attn_fwd_sm80.cu
set -euo pipefail
cd "$(dirname "$0")/.."
src=${1:?usage: sass-check.sh FILE.cu [REGEX]}
want=${2:-'HMMA[.A-Z0-9]*|HGMMA[.A-Z0-9]*|IMMA[.A-Z0-9]*|QGMMA[.A-Z0-9]*|F2FP[.A-Z0-9]*|(LDG|STG|LDS|STS|LDSM)[.A-Z0-9]*|MUFU[.A-Z0-9]*'}
tools=build/cuda-tools
if [ ! -x "$tools/cuobjdump" ] || [ ! -x "$tools/nvdisasm" ]; then
  mkdir -p "$tools/wheels"
  python3 -m pip download -q --no-deps -d "$tools/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  for w in "$tools"/wheels/*.whl; do
    python3 -m zipfile -e "$w" "$tools/unpacked" >/dev/null
  done
  for b in cuobjdump nvdisasm; do
    cp "$(find "$tools/unpacked" -name "$b" -type f | head -n 1)" "$tools/$b"
    chmod +x "$tools/$b"
  done
fi
export PATH="$PWD/$tools:$PATH"
obj=$(mktemp --suffix=.o)
trap 'rm -f "$obj"' EXIT
archs=${SASS_ARCHS:-sm_90a sm_80}
gencode=()
for arch in $archs; do
  case $arch in
    sm_*) gencode+=("-gencode=arch=compute_${arch#sm_},code=$arch") ;;
    *) echo "sass-check: SASS_ARCHS holds '$arch'; name machine-code images, e.g. sm_86" >&2 && exit 2 ;;
  esac
done
# The compile flags of src/backend/cuda/CMakeLists.txt for those images.
nvcc -c "${gencode[@]}" \
  -DFMT_HEADER_ONLY=1 -DH3S_HAVE_CUDA=1 -I src -I include -O3 -fmad=false -std=c++20 \
  --expt-relaxed-constexpr -Werror=all-warnings -Xptxas -v "$src" -o "$obj" 2>&1 |
  awk '/Compiling entry function/ {match($0, /'"'"'[^'"'"']*'"'"'/); k = substr($0, RSTART + 1, RLENGTH - 2);
                                    match($0, /for '"'"'sm_[0-9a]*'"'"'/); a = substr($0, RSTART + 5, RLENGTH - 6)}
       /Used [0-9]+ registers/ {match($0, /Used [0-9]+ registers/); r = substr($0, RSTART + 5, RLENGTH - 15)}
       /spill stores/ {match($0, /[0-9]+ bytes spill stores/); s = substr($0, RSTART, RLENGTH);
                       match($0, /[0-9]+ bytes stack frame/); f = substr($0, RSTART, RLENGTH)}
       /Used [0-9]+ registers/ {printf "%-6s %4s regs  %-22s %-20s %s\n", a, r, s, f, k}' |
  c++filt
for arch in $archs; do
  echo "== $arch: instruction counts per kernel (${want})"
  cuobjdump -sass -arch "$arch" "$obj" | awk -v re="$want" '
    /Function :/ {name = $3}
    { while (match($0, re)) { n[name SUBSEP substr($0, RSTART, RLENGTH)]++; $0 = substr($0, RSTART + RLENGTH) } }
    END { for (k in n) { split(k, p, SUBSEP); printf "%s\t%s\t%d\n", p[1], p[2], n[k] } }' |
    sort | c++filt | awk -F'\t' '{ if ($1 != last) { print "  " $1; last = $1 } printf "    %-28s %d\n", $2, $3 }'
done
