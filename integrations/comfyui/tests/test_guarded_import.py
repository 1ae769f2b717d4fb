"""Guarded import: without the native module the pack loads, minus H3 Streamed Blocks,
and prints exactly one line; with it, every node and no output."""

import os
import subprocess
import sys
import textwrap

from conftest import PACK

LOADER = textwrap.dedent("""
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("pack_under_test", {init!r})
    mod = importlib.util.module_from_spec(spec)
    sys.modules["pack_under_test"] = mod
    spec.loader.exec_module(mod)
    print("NODES", sorted(mod.NODE_CLASS_MAPPINGS))
""")


def _run(tmp_path, fake_h3stream=None):
    env = dict(os.environ)
    site = tmp_path / "site"
    site.mkdir()
    if fake_h3stream is not None:
        (site / "h3stream").mkdir()
        (site / "h3stream" / "__init__.py").write_text(fake_h3stream)
    env["PYTHONPATH"] = str(site)  # the fake shadows any installed h3stream
    code = LOADER.format(init=os.path.join(PACK, "__init__.py"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=str(tmp_path), timeout=120)
    assert r.returncode == 0, r.stderr
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    nodes = [l for l in lines if l.startswith("NODES")]
    return [l for l in lines if not l.startswith("NODES")], nodes[0]


def test_missing_native_module_prints_one_line_and_loads_the_others(tmp_path):
    broken = "raise ImportError('libh3s.so: cannot open shared object file')\n"
    lines, nodes = _run(tmp_path, broken)
    assert len(lines) == 1, lines
    assert lines[0].startswith("[h3stream]") and "libh3s.so" in lines[0] and "Fix:" in lines[0]
    assert "H3StreamedBlocks" not in nodes
    for n in ("H3MemoryProbe", "H3PrecisionProbe", "H3FreeCache", "H3EvictTextEncoder"):
        assert n in nodes


def test_working_native_module_registers_every_node_silently(tmp_path):
    fake = "class Engine: pass\nclass Options: pass\n"
    lines, nodes = _run(tmp_path, fake)
    assert lines == []
    for n in ("H3StreamedBlocks", "H3MemoryProbe", "H3PrecisionProbe", "H3FreeCache",
              "H3EvictTextEncoder"):
        assert n in nodes
