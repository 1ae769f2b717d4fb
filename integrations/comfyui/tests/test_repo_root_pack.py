"""The repository root as the node pack: its __init__.py loaded the way ComfyUI's
load_custom_node loads a cloned pack (a module named by its path), install.py's choice of
wheel, and pyproject.toml's fields for the Comfy Registry. ComfyUI's own loader runs in
scripts/comfyui_pack_load.py."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap

from conftest import REPO, need

# ComfyUI's nodes.load_custom_node: the module's name is the folder's path (dots as "_x_").
LOADER = textwrap.dedent("""
    import importlib.util, os, sys
    path = {pack!r}
    name = path.replace(".", "_x_")
    spec = importlib.util.spec_from_file_location(name, os.path.join(path, "__init__.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    print("NODES", sorted(mod.NODE_CLASS_MAPPINGS))
    print("NAMES", sorted(mod.NODE_DISPLAY_NAME_MAPPINGS))
""")

ALL_NODES = ["H3EvictTextEncoder", "H3FreeCache", "H3MemoryProbe", "H3PrecisionProbe",
             "H3StreamedBlocks"]


def clone(tmp_path):
    """custom_nodes/h3stream with the root's __init__.py and the pack's code, as a clone."""
    pack = tmp_path / "custom_nodes" / "h3stream"
    shutil.copytree(os.path.join(REPO, "integrations", "comfyui"),
                    pack / "integrations" / "comfyui",
                    ignore=shutil.ignore_patterns("tests", "__pycache__"))
    shutil.copy(os.path.join(REPO, "__init__.py"), pack / "__init__.py")
    return pack


def run(tmp_path, code, h3stream_init=None, cwd=None, flags=()):
    """Runs `code` in a fresh Python; h3stream_init, when given, is the only h3stream it
    can import. Returns (exit code, output lines)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    if h3stream_init is not None:
        site = tmp_path / "site"
        (site / "h3stream").mkdir(parents=True)
        (site / "h3stream" / "__init__.py").write_text(h3stream_init)
        env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                       env=env, cwd=str(cwd or tmp_path), timeout=120)
    return r.returncode, [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]


def test_the_root_loads_every_node_like_a_cloned_pack(tmp_path):
    pack = clone(tmp_path)
    code, lines = run(tmp_path, LOADER.format(pack=str(pack)),
                      "class Engine: pass\nclass Options: pass\n")
    assert code == 0, lines
    assert lines[0] == f"NODES {ALL_NODES}", lines
    assert lines[1].startswith("NAMES") and "H3StreamedBlocks" in lines[1], lines
    assert len(lines) == 2, lines  # nothing else printed


def test_without_the_module_the_root_loads_the_others_and_prints_one_line(tmp_path):
    pack = clone(tmp_path)
    code, lines = run(tmp_path, LOADER.format(pack=str(pack)),
                      "raise ImportError('no wheel installed')\n")
    assert code == 0, lines
    said = [l for l in lines if not l.startswith(("NODES", "NAMES"))]
    assert len(said) == 1 and said[0].startswith("[h3stream]") and "Fix:" in said[0], lines
    nodes = next(l for l in lines if l.startswith("NODES"))
    assert nodes == f"NODES {[n for n in ALL_NODES if n != 'H3StreamedBlocks']}", lines


def test_the_clone_imported_by_its_name_hands_over_to_the_installed_module(tmp_path):
    """`import h3stream` from custom_nodes/ (its parent on sys.path) finds the clone first;
    the clone gives the installed module instead."""
    pack = clone(tmp_path)
    probe = "import h3stream; print(h3stream.WHICH)"
    code, lines = run(tmp_path, probe, "WHICH = 'installed'\n", cwd=pack.parent)
    assert (code, lines) == (0, ["installed"])
    # None installed (-S: no site-packages): one line saying what this folder is.
    code, lines = run(tmp_path, probe, cwd=pack.parent, flags=("-S",))
    assert code != 0 and "this folder is the h3stream repository" in lines[-1], lines


def load_install_py():
    spec = importlib.util.spec_from_file_location("h3s_install", os.path.join(REPO, "install.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_install_py_takes_the_given_wheel_then_dist_then_dist_cpu(tmp_path):
    install = load_install_py()
    assert install.find_wheel(str(tmp_path), {}) is None
    assert install.find_wheel(str(tmp_path), {"H3STREAM_WHEEL": "https://x/h3stream.whl"}) == \
        "https://x/h3stream.whl"
    (tmp_path / "dist" / "cpu").mkdir(parents=True)
    cpu = tmp_path / "dist" / "cpu" / "h3stream-0.3.0-cp312-abi3-manylinux_2_34_x86_64.whl"
    cpu.write_bytes(b"")
    assert install.find_wheel(str(tmp_path), {}) == str(cpu)
    old = tmp_path / "dist" / "h3stream-0.2.0-cp312-abi3-manylinux_2_34_x86_64.whl"
    new = tmp_path / "dist" / "h3stream-0.3.0-cp312-abi3-manylinux_2_34_x86_64.whl"
    old.write_bytes(b"")
    new.write_bytes(b"")
    os.utime(old, (1, 1))
    assert install.find_wheel(str(tmp_path), {}) == str(new)  # dist/ first, the newest there


def test_install_py_refuses_a_wheel_this_python_cannot_take_in_one_line():
    install = load_install_py()
    whl = "dist/h3stream-0.3.0-cp312-abi3-manylinux_2_34_x86_64.whl"
    assert install.unsupported(whl, (3, 12, 1), "linux") is None
    assert install.unsupported(whl, (3, 13, 0), "linux") is None
    why = install.unsupported(whl, (3, 11, 7), "linux")
    assert "CPython 3.12 or newer" in why and "3.11" in why and "\n" not in why
    why = install.unsupported(whl, (3, 12, 1), "win32")
    assert "is for Linux" in why and "win32" in why


def test_install_py_without_a_wheel_says_how_to_get_one_in_one_line(tmp_path):
    shutil.copy(os.path.join(REPO, "install.py"), tmp_path / "install.py")
    env = {k: v for k, v in os.environ.items() if k != "H3STREAM_WHEEL"}
    r = subprocess.run([sys.executable, str(tmp_path / "install.py")], capture_output=True,
                       text=True, env=env, timeout=60)
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    assert r.returncode == 0 and len(lines) == 1, lines
    assert "scripts/build-wheel.sh" in lines[0] and "H3STREAM_WHEEL" in lines[0], lines


def test_pyproject_has_what_the_comfy_registry_reads():
    tomllib = need("tomllib")  # Python 3.11+

    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        meta = tomllib.load(f)
    project, comfy = meta["project"], meta["tool"]["comfy"]
    assert re.fullmatch(r"[A-Za-z][A-Za-z0-9._-]*", project["name"]), project["name"]
    assert "version" not in project.get("dynamic", [])
    with open(os.path.join(REPO, "CMakeLists.txt"), encoding="utf-8") as f:
        cmake_version = re.search(r"project\(h3stream VERSION ([0-9.]+)", f.read()).group(1)
    assert project["version"] == cmake_version
    assert project["description"]
    for key in ("PublisherId", "DisplayName", "Icon"):
        assert key in comfy, key
    assert comfy["PublisherId"] and comfy["DisplayName"]
    # The node pack never asks an index for h3stream: it comes from the wheel (install.py).
    assert not any(d.split()[0].lower().startswith("h3stream") for d in project["dependencies"])
    requirements = os.path.join(REPO, "requirements.txt")
    if os.path.exists(requirements):
        with open(requirements, encoding="utf-8") as f:
            assert not re.search(r"^\s*h3stream", f.read(), re.M | re.I)
