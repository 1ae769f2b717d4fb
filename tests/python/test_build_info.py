"""build_info(): the version, the commit and the GPU images of the installed module; and the
import's driver check (a CUDA 13 build on a driver older than R580 fails in one line)."""

import os
import re
import shutil
import subprocess
import sys

import h3stream
from h3stream import _load
from h3stream._build_info import device_image_name

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def project_version():
    with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as f:
        return re.search(r'^version = "([^"]+)"$', f.read(), re.M).group(1)


def test_build_info_names_the_version_and_the_commit():
    info = h3stream.build_info()
    assert info["version"] == h3stream.__version__ == project_version()
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", info["git_commit"]), info


def test_build_info_names_the_cuda_images_or_none():
    info = h3stream.build_info()
    if not h3stream.cuda_built():
        assert info["cuda"] is None
        return
    cuda = info["cuda"]
    assert re.fullmatch(r"\d+\.\d", cuda["runtime"]), cuda
    assert "sm_80" in cuda["sass"] and "compute_80" in cuda["ptx"], cuda
    assert "sm_90a" in cuda["hopper_kernels"] and "sm_89" in cuda["kvi8s_sm89_kernel"], cuda
    if h3stream.has_cuda():
        device = cuda["device"]
        assert device["index"] == 0 and device["name"], device
        assert device["image"] is not None, device
    else:
        assert cuda["device"] is None


def test_build_info_without_the_device_query():
    cuda = h3stream.build_info(device=None)["cuda"]
    assert cuda is None or cuda["device"] is None


def test_device_image_names_the_shipped_image_or_the_driver_compiled_ptx():
    sass = ["sm_80", "sm_86", "sm_89", "sm_90a", "sm_120"]
    assert device_image_name(sass, 90, 90) == "sm_90a"
    assert device_image_name(sass, 86, 86) == "sm_86"
    assert device_image_name(["sm_90a", "sm_80"], 80, 80) == "sm_80"  # an sm_86 card today
    assert device_image_name(sass, 120, 80) == "compute_80 PTX compiled by the driver for sm_120"
    assert device_image_name(sass, 90, 80).startswith("compute_80 PTX")  # CUDA_FORCE_PTX_JIT=1
    assert device_image_name(sass, 0, 0) is None


def test_driver_check():
    problem = _load.cuda_driver_problem
    assert problem(0, 12040) is None  # a CPU-only build runs anywhere
    assert problem(13000, 0) is None  # no driver at all: the CPU backend runs
    assert problem(13000, 13000) is None
    assert problem(13020, 13000) is None  # minor version compatibility within CUDA 13
    assert problem(13000, 13010) is None
    line = problem(13000, 12080)
    assert line is not None and "\n" not in line
    for part in ("CUDA 13.0", "R580", "12.8", "update the NVIDIA driver", "--cpu"):
        assert part in line, line


def test_an_old_driver_fails_the_import_in_one_line(tmp_path):
    """The package's own files over a stand-in native module that reports a CUDA 13 runtime
    and a CUDA 12.4 driver: `import h3stream` raises, and the message is one line."""
    pkg = tmp_path / "h3stream"
    shutil.copytree(os.path.join(REPO, "python", "h3stream"), pkg,
                    ignore=shutil.ignore_patterns("__pycache__", "_h3stream*"))
    (pkg / "_h3stream.py").write_text("def cuda_runtime_version():\n    return 13000\n\n"
                                      "def cuda_driver_version():\n    return 12040\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    code = "import h3stream"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: h3stream: this build's CUDA 13.0 runtime needs"), r.stderr
    assert "R580" in last and "12.4" in last, last
