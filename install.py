"""Installs the h3stream wheel into the Python that runs this script: ComfyUI-Manager runs
install.py with ComfyUI's Python after it clones the node pack (this repository); by hand:
`/path/to/ComfyUI/venv/bin/python install.py`.

The wheel is $H3STREAM_WHEEL (a path or URL of an h3stream-*.whl), else the newest one in
this repository's dist/ (scripts/build-wheel.sh), then dist/cpu/ (its --cpu build). pip
runs with --no-index: h3stream is never fetched from a package index (none publishes it).
Without a wheel this says in one line how to get one and exits 0: the pack still loads,
minus 'H3 Streamed Blocks'.
"""

import glob
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))
PREFIX = "[h3stream] install.py:"
HOW = ("build one here with `bash scripts/build-wheel.sh` (CUDA; `--cpu`: CPU only; README "
       "\"Wheel\") or set H3STREAM_WHEEL to the path or URL of an h3stream-*.whl, then run "
       "install.py again")


def find_wheel(root=ROOT, environ=None):
    """The wheel to install: $H3STREAM_WHEEL, else the newest h3stream-*.whl in dist/,
    then in dist/cpu/; None when there is none."""
    environ = os.environ if environ is None else environ
    given = environ.get("H3STREAM_WHEEL", "").strip()
    if given:
        return given
    for folder in (("dist",), ("dist", "cpu")):
        wheels = glob.glob(os.path.join(root, *folder, "h3stream-*.whl"))
        if wheels:
            return max(wheels, key=os.path.getmtime)
    return None


def unsupported(wheel, version=sys.version_info, platform=sys.platform):
    """One line saying why `wheel` cannot install on this Python, or None (pip decides)."""
    name = os.path.basename(wheel)
    if "-abi3-" in name and "-cp312-" in name and tuple(version[:2]) < (3, 12):
        return (f"{name} needs CPython 3.12 or newer, this is {version[0]}.{version[1]}: run "
                "ComfyUI on Python 3.12+, or build h3stream for this Python with `pip install .`")
    if "linux" in name and not platform.startswith("linux"):
        return (f"{name} is for Linux; no h3stream wheel exists for {platform} yet (README "
                "\"Wheel\")")
    return None


def main():
    wheel = find_wheel()
    if wheel is None:
        print(f"{PREFIX} no h3stream wheel (dist/ holds none and H3STREAM_WHEEL is not set): "
              f"{HOW}; until then the node pack loads without 'H3 Streamed Blocks'")
        return 0
    why = unsupported(wheel)
    if why is not None:
        print(f"{PREFIX} {why}")
        return 1
    cmd = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--force-reinstall",
           wheel]
    print(f"{PREFIX} {' '.join(cmd)}", flush=True)
    code = subprocess.call(cmd)
    if code != 0:
        print(f"{PREFIX} pip could not install {wheel} (exit {code}); {HOW}")
    return code


if __name__ == "__main__":
    sys.exit(main())
