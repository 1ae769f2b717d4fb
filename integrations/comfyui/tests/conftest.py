"""Tests of the node pack's pure-Python parts: no ComfyUI needed (a few fakes stand
in for the ComfyUI objects the nodes touch), torch only where tensors are needed.

A test that needs torch, safetensors, comfy-kitchen or the h3stream module gets it through
need(): skipped where the module is not installed, but failed (never skipped) when
H3S_REQUIRE_MODULE=1, which scripts/python-test.sh sets after installing them all."""

import importlib
import importlib.util
import os
import sys

import pytest

REQUIRE_MODULES = os.environ.get("H3S_REQUIRE_MODULE") == "1"


def need(name):
    """The imported module `name`; without it the calling test (or test module) skips, or
    fails when H3S_REQUIRE_MODULE=1."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        if REQUIRE_MODULES:
            pytest.fail(f"{name} does not import ({e}) and H3S_REQUIRE_MODULE=1 says it must",
                        pytrace=False)
        pytest.skip(f"needs {name} ({e})", allow_module_level=True)

PACK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(os.path.dirname(PACK))


def load_pack(name="h3s_comfyui_pack"):
    """Import the pack the way ComfyUI's load_custom_node does (spec from __init__.py)."""
    for k in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
        del sys.modules[k]
    spec = importlib.util.spec_from_file_location(name, os.path.join(PACK, "__init__.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def features_md():
    """docs/FEATURES.md, the repository's own statement of the controls."""
    return os.path.join(REPO, "docs", "FEATURES.md")
