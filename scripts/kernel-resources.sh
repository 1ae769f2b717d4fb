#!/usr/bin/env bash
# The resources of every kernel, per machine-code image of the release wheel,
# from ptxas's report (no GPU needed): registers, spill stores/loads, static
# shared memory and stack frame, one line per (kernel, image). Fails (exit 1),
# naming the kernel, the image and the value, where a kernel spills, has a stack
# frame (an indexed array or a call left in local memory: a rolled loop over a
# register array put the Hopper attention's row max on the stack and cost 2.3x,
# bench/results/2026-12-07_h100_attention_tree_max_stack.txt), uses more than
# 255 registers, or, off Hopper, asks for more than 99 KiB of static shared
# memory (the opt-in maximum of a block on sm_86/89/120, arch/smem_limits.hpp).
# (Dynamic shared memory is checked at compile time: the static_asserts against
# arch::kSmemOptInSm86.)
#
# Which files and images: src/backend/cuda/cuda_images.cmake with H3S_FAT_ARCHS
# (the wheel's list), each .cu's real images: sm_80, sm_86, sm_89, sm_90a,
# sm_120 where the file has them.
# Flags: the release build's (cuda_images.cmake's H3S_CUDA_FLAGS with CMake's
# Release -O3 -DNDEBUG, C++20, the h3s_cuda target's includes and definitions)
# without -Werror=all-warnings, so a spill is reported here rather than aborting
# ptxas. Device code only (nvcc --fatbin: no host compile), each image from its
# own compute_XX PTX as the wheel builds it: one compute_80 PTX through ptxas per
# architecture gives another report (up to 23 registers apart on sm_120: the
# front end's PTX differs per target). A file's report is kept in
# build/kernel-resources/, keyed by the hash of nvcc's version, the flags, its
# images, the file and every header under src/ and include/; the first run takes
# ~50-80 s on 2 cores, a run with nothing changed under 1 s.
#   usage: bash scripts/kernel-resources.sh    (H3S_JOBS: parallel nvcc runs, default nproc)
set -euo pipefail
cd "$(dirname "$0")/.."

# Allowed past the limits today: "IMAGE KERNEL" (the name as printed below),
# each with a comment giving the measured value and the issue that fixes it.
# None today.
allow=()

limit_smem=101376  # 99 KiB: sm_86/89/120's opt-in maximum per block (sm_80: 163 KiB)
limit_regs=255
jobs=${H3S_JOBS:-$(nproc)}
cache=build/kernel-resources
mkdir -p "$cache"

listing=$(cmake -DH3S_FAT_ARCHS=ON -P src/backend/cuda/cuda_images.cmake)
flags=$(sed -n 's/^flags //p' <<<"$listing" | sed 's/-Werror=all-warnings//')
common="-DFMT_HEADER_ONLY=1 -DH3S_HAVE_CUDA=1 -Isrc -Iinclude -O3 -DNDEBUG -std=c++20 $flags"
headers=$(find src include -name '*.cuh' -o -name '*.hpp' -o -name '*.h' | LC_ALL=C sort |
  xargs sha256sum | sha256sum | cut -c1-64)
toolchain=$(nvcc --version | tail -n 2 | tr '\n' ' ')

# One "FILE KEY GENCODES" line per file to compile.
work=()
while read -r file images; do
  case $file in flags | "") continue ;; esac
  gencode=""
  for image in $images; do
    case $image in
      sm_*) gencode+=" -gencode=arch=compute_${image#sm_},code=$image" ;;
    esac
  done
  [ -n "$gencode" ] || continue
  src=src/backend/cuda/$file
  key=$(printf '%s\n' "$toolchain" "$common" "$gencode" "$headers" "$(sha256sum <"$src")" |
    sha256sum | cut -c1-24)
  work+=("$src $key $gencode")
done <<<"$listing"

compile() {  # FILE KEY GENCODE...: ptxas's report into the cache
  local src=$1 key=$2
  shift 2
  local log=$cache/$key.log
  [ -s "$log" ] && return 0
  local out
  out=$(mktemp -d)
  # shellcheck disable=SC2086
  if ! nvcc $common "$@" --resource-usage --fatbin -x cu "$src" -o "$out/a.fatbin" >"$out/log" 2>&1; then
    cat "$out/log"
    echo "kernel-resources: nvcc failed on $src"
    rm -rf "$out"
    return 1
  fi
  mv "$out/log" "$log"
  rm -rf "$out"
}
export -f compile
export common cache
start=$SECONDS
printf '%s\n' "${work[@]}" | xargs -P "$jobs" -L 1 bash -c 'compile "$@"' _
echo "kernel-resources: ${#work[@]} files, $((SECONDS - start)) s of nvcc ($jobs jobs; $toolchain)"
# Reports of older sources go.
declare -A keep
for w in "${work[@]}"; do
  read -r _ key _ <<<"$w"
  keep[$key]=1
done
for log in "$cache"/*.log; do
  key=$(basename "$log" .log)
  [ -n "${keep[$key]:-}" ] || rm -f "$log"
done

for w in "${work[@]}"; do
  read -r src key _ <<<"$w"
  echo "== $src"
  cat "$cache/$key.log"
done | c++filt >"$cache/report.txt"
# The report -> the table and the verdict.
read -r -d '' check <<'EOF' || true
import re, sys
limit_smem, limit_regs = int(sys.argv[1]), int(sys.argv[2])
allow = set(sys.argv[3:])

def short(name):
    # "void h3s::cuda::(anonymous namespace)::k<...>(args)" -> "k<...>"
    name = name.replace("(anonymous namespace)::", "").replace("h3s::cuda::", "")
    name = re.sub(r"^void ", "", name)
    depth = 0
    for i, c in enumerate(name):
        depth += (c == "<") - (c == ">")
        if c == "(" and depth == 0:
            return name[:i]
    return name

rows, failures = [], []
src = row = None
for line in sys.stdin:
    if line.startswith("== "):
        src = line[3:].strip().removeprefix("src/backend/cuda/")
    elif m := re.search(r"Compiling entry function '(.*)' for '(sm_\w+)'", line):
        kernel, image = short(m.group(1)), m.group(2)
        row = {"src": src, "kernel": kernel, "image": image, "stack": 0, "st": 0, "ld": 0}
        rows.append(row)
    elif m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line):
        # The entry and any function it calls (not inlined): their spills are its.
        if row is None:
            continue
        row["stack"] = max(row["stack"], int(m.group(1)))
        row["st"] += int(m.group(2))
        row["ld"] += int(m.group(3))
    elif row is not None and (m := re.search(r"Used (\d+) registers", line)):
        row["regs"] = int(m.group(1))
        s = re.search(r"(\d+) bytes smem", line)
        row["smem"] = int(s.group(1)) if s else 0

print(f"{'image':7}{'regs':>5}{'spill st/ld':>13}{'smem':>8}{'stack':>7}  file: kernel")
for r in sorted(rows, key=lambda r: (r["src"], r["kernel"], int(re.sub(r"\D", "", r["image"])))):
    regs, smem, spills = r.get("regs"), r.get("smem", 0), f"{r['st']}/{r['ld']}"
    line = f"{r['image']:7}{str(regs):>5}{spills:>13}{smem:>8}{r['stack']:>7}  {r['src']}: {r['kernel']}"
    bad = []
    if regs is None:
        bad.append("no register count in ptxas's report")
    elif regs > limit_regs:
        bad.append(f"{regs} registers > {limit_regs}")
    if r["st"] or r["ld"]:
        bad.append(f"spills {r['st']} bytes (stores), {r['ld']} (loads)")
    if r["stack"]:
        bad.append(f"a {r['stack']}-byte stack frame")
    if smem > limit_smem and not r["image"].startswith("sm_90"):
        bad.append(f"{smem} bytes of static shared memory > {limit_smem}")
    allowed = f"{r['image']} {r['kernel']}" in allow
    print(line + ("  (over the limits: allowed)" if bad and allowed else "  << over the limits" if bad else ""))
    if bad and not allowed:
        failures.append(f"{r['kernel']} ({r['src']}) on {r['image']}: " + "; ".join(bad))
kernels = len({(r["src"], r["kernel"]) for r in rows})
print(f"kernel-resources: {kernels} kernels, {len(rows)} (kernel, image) pairs, "
      f"limits: no spills, no stack frame, registers <= {limit_regs}, "
      f"static smem <= {limit_smem} bytes off Hopper")
for f in failures:
    print("kernel-resources: FAIL " + f)
sys.exit(1 if failures or not rows else 0)
EOF
python3 -c "$check" "$limit_smem" "$limit_regs" "${allow[@]}" <"$cache/report.txt"
