#!/usr/bin/env bash
# Builds and installs the h3stream Python package with `pip install .` into a
# venv and runs its pytest suite (tests/python). Part of scripts/test.sh (CI).
#
#   H3S_PYTHON_CUDA=ON   build the wheel with the CUDA backend too (default OFF
#                        here: the CUDA backend is compiled once, by the release
#                        build of scripts/test.sh; a CPU wheel keeps this step short)
#   H3S_PYENV=DIR        the venv (default build/pyenv, shared with the interop test)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${H3S_PYENV:-build/pyenv}
py=$venv/bin/python
if [ ! -x "$py" ]; then
  python3 -m venv "$venv" || { rm -rf "$venv" && apt-get install -y -q python3-venv >/dev/null &&
    python3 -m venv "$venv"; }
fi
pip=("$py" -m pip install -q --disable-pip-version-check)
step() { echo "python-test: $1 (${SECONDS}s)"; }
"${pip[@]}" pytest safetensors numpy

torch_ok() { "$py" -c "import torch; assert torch.ones(2).add(1).sum().item() == 4" >/dev/null 2>&1; }
if ! torch_ok; then
  # Tests use torch on the CPU only. PyPI's Linux torch pulls ~3 GB of CUDA
  # wheels; most of its CUDA libraries are already on machines with the CUDA
  # toolkit, so first try torch without dependencies plus its pure-Python
  # requirements and the four CUDA wheels the toolkit lacks (pinned as torch
  # pins them); if torch still does not import, install it with everything.
  "${pip[@]}" --no-deps torch
  lean=$("$py" - <<'PY'
import importlib.metadata as md, re
wanted = {"filelock", "typing-extensions", "sympy", "networkx", "jinja2", "fsspec",
          "nvidia-cusparselt-cu13", "nvidia-nvshmem-cu13", "nvidia-nccl-cu13"}
out = ["mpmath", "markupsafe", "nvidia-cufile"]
for r in md.requires("torch") or []:
    spec = r.split(";")[0].strip()
    name = re.split(r"[<>=!~\[ ]", spec, maxsplit=1)[0].lower()
    if name in wanted and "extra ==" not in r:
        out.append(spec.replace(" ", ""))
print(" ".join(out))
PY
)
  # shellcheck disable=SC2086
  "${pip[@]}" --no-deps $lean || true
  if torch_ok; then
    echo "python-test: torch $("$py" -c 'import torch; print(torch.__version__)') (lean install)"
  else
    echo "python-test: lean torch install does not import; installing torch with its dependencies"
    "${pip[@]}" torch
  fi
fi
step "torch ready"
# comfy-kitchen at the version ComfyUI pins: the node pack's precision probe claims its
# quantisers are bit-equal to comfy-kitchen's eager ones, and that test must run (it fails,
# never skips, under H3S_REQUIRE_MODULE=1). 0.2.31 has a cp311 wheel and a cp312 abi3
# wheel for x86-64 Linux, so python3 3.11 and 3.12+ both install it; no dependencies
# beyond torch, which is already there.
"${pip[@]}" comfy-kitchen==0.2.31

# The package itself: scikit-build-core + nanobind from PyPI (build isolation),
# CMake + Ninja + the Debian packages of scripts/setup-deps.sh.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
"${pip[@]}" . -C cmake.define.H3S_CUDA="${H3S_PYTHON_CUDA:-OFF}"
step "h3stream installed"

# From tests/python, so `import h3stream` is the installed package, not python/.
# torch, safetensors and h3stream are installed now: a test that needs them fails
# instead of skipping (integrations/comfyui/tests/conftest.py need()).
# --confcutdir: pytest collects from that folder down, never the repository root,
# whose __init__.py (the node pack's entry) it would import as a package named after
# the checkout's folder, with that folder's parent put first on sys.path.
export H3S_REQUIRE_MODULE=1
py=$(cd "$(dirname "$py")" && pwd)/python
cd tests/python
"$py" -m pytest -q -p no:cacheprovider --confcutdir=. .
step "pytest done"

# The ComfyUI node pack's own tests (no ComfyUI needed: fakes of its model
# classes, and of h3stream where a test says so; test_mlp_half_real.py runs the
# installed module).
cd ../..
"$py" -m pytest -q -p no:cacheprovider --confcutdir=integrations/comfyui/tests \
  integrations/comfyui/tests
step "node pack pytest done"
