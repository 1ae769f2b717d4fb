#!/usr/bin/env python3
"""The repository as a ComfyUI node pack, loaded by ComfyUI's own custom-node loader on the
CPU: a copy of the repository's files in a fake custom_nodes/h3stream (as a clone leaves
them), then in a fresh ComfyUI process each (scripts/comfyui_e2e.py's set-up):

  with h3stream   nodes.load_custom_node registers all five nodes, prints no [h3stream]
                  line, and ComfyUI's pyproject parser reads [tool.comfy];
  without it      (an h3stream that fails to import first on the path) exactly one
                  [h3stream] line, and the four other nodes.

    python scripts/comfyui_pack_load.py COMFYUI_DIR [--wheel WHEEL]

Run it with ComfyUI's Python (torch and ComfyUI's requirements; scripts/comfyui-e2e.sh says
what the e2e machine needs). h3stream comes from --wheel, installed into a temporary folder
(the Python's own packages are not touched), else from dist/cpu/ or dist/, else the one
installed. Exit 0 = PASS.
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALL_NODES = ["H3EvictTextEncoder", "H3FreeCache", "H3MemoryProbe", "H3PrecisionProbe",
             "H3StreamedBlocks"]

# Runs in the ComfyUI process: ComfyUI set up on the CPU, then its loader on the pack.
LOAD = r"""
import asyncio, json, sys
sys.path.insert(0, {scripts!r})
from comfyui_e2e import setup_comfy
nodes, _ = setup_comfy({comfy!r}, cpu=True)
before = set(nodes.NODE_CLASS_MAPPINGS)
ok = asyncio.run(nodes.load_custom_node({pack!r}))
added = sorted(set(nodes.NODE_CLASS_MAPPINGS) - before)
try:
    from comfy_config import config_parser
    cfg = config_parser.extract_node_configuration({pack!r})
    registry = {{"name": cfg.project.name, "version": cfg.project.version,
                "publisher": cfg.tool_comfy.publisher_id,
                "display_name": cfg.tool_comfy.display_name}}
except ImportError as e:  # ComfyUI's parser needs pydantic-settings
    registry = {{"skipped": str(e)}}
print("RESULT " + json.dumps({{"ok": ok, "nodes": added, "registry": registry}}))
"""


def copy_repository(dest):
    """The files a clone has: git's tracked and untracked-but-not-ignored ones."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                             cwd=REPO, capture_output=True, check=True).stdout.decode()
        files = [f for f in out.split("\0") if f and os.path.isfile(os.path.join(REPO, f))]
    except (OSError, subprocess.CalledProcessError):
        files = None
    if not files:
        shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns("build*", "dist", ".*"))
        return
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(dest, f)), exist_ok=True)
        shutil.copy2(os.path.join(REPO, f), os.path.join(dest, f))


def run_comfy(comfy, pack, pythonpath):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    code = LOAD.format(scripts=os.path.join(REPO, "scripts"), comfy=comfy, pack=pack)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=comfy, timeout=600)
    lines = (r.stdout + r.stderr).splitlines()
    results = [json.loads(l[len("RESULT "):]) for l in lines if l.startswith("RESULT ")]
    if r.returncode != 0 or not results:
        print("\n".join(lines[-40:]))
        raise SystemExit(f"comfyui-pack-load: the ComfyUI process failed (exit {r.returncode})")
    return results[0], [l for l in lines if "[h3stream]" in l]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("comfy", help="the ComfyUI checkout (e.g. .ext/ComfyUI)")
    ap.add_argument("--wheel", help="the h3stream wheel to load (default: dist/cpu/, dist/)")
    args = ap.parse_args()
    comfy = os.path.abspath(args.comfy)
    wheels = (glob.glob(os.path.join(REPO, "dist", "cpu", "h3stream-*.whl")) +
              glob.glob(os.path.join(REPO, "dist", "h3stream-*.whl")))
    wheel = args.wheel or (wheels[0] if wheels else None)
    failures = []
    with tempfile.TemporaryDirectory(prefix="h3s-pack-load-") as tmp:
        pack = os.path.join(tmp, "custom_nodes", "h3stream")
        copy_repository(pack)
        site = []
        if wheel:
            site = [os.path.join(tmp, "site")]
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                            "--disable-pip-version-check", "--target", site[0], wheel], check=True)
        print(f"comfyui-pack-load: ComfyUI {comfy}, h3stream from {wheel or 'the installed one'}")

        result, said = run_comfy(comfy, pack, site)
        print(f"  with h3stream:    loaded {result['ok']}, nodes {result['nodes']}, "
              f"[h3stream] lines {len(said)}, registry {result['registry']}")
        if not result["ok"] or result["nodes"] != ALL_NODES or said:
            failures.append("with h3stream: every node, no [h3stream] line")
        reg = result["registry"]
        if "skipped" not in reg and (reg["name"] != "h3stream" or not reg["publisher"]):
            failures.append("ComfyUI's parser: name and PublisherId from pyproject.toml")

        broken = os.path.join(tmp, "broken", "h3stream")
        os.makedirs(broken)
        with open(os.path.join(broken, "__init__.py"), "w") as f:
            f.write("raise ImportError('stand-in: no h3stream wheel installed')\n")
        result, said = run_comfy(comfy, pack, [os.path.dirname(broken)])
        print(f"  without h3stream: loaded {result['ok']}, nodes {result['nodes']}, "
              f"[h3stream] lines {len(said)}: {said[:1]}")
        others = [n for n in ALL_NODES if n != "H3StreamedBlocks"]
        if not result["ok"] or result["nodes"] != others or len(said) != 1:
            failures.append("without h3stream: the four other nodes and one [h3stream] line")
    for f in failures:
        print(f"comfyui-pack-load: FAIL {f}")
    print("comfyui-pack-load:", "FAIL" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
