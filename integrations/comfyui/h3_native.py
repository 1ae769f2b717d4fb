"""Guarded import of the native module: h3stream loads, or exactly one console
line says why and the rest of the node pack still loads."""

import importlib

_state = {"tried": False, "module": None, "reason": None}
PREFIX = "[h3stream]"


def _why(exc):
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def load(printer=print, module_name="h3stream"):
    """(module, None) when the native module imports, else (None, reason).

    Tried once per process; the first failure prints one line through printer."""
    if not _state["tried"]:
        _state["tried"] = True
        try:
            mod = importlib.import_module(module_name)
            # the native part is what can fail: touch it now, not mid-sampling
            getattr(mod, "Engine")
            getattr(mod, "Options")
            _state["module"] = mod
        except Exception as e:  # ImportError, OSError from a missing .so, ...
            _state["reason"] = _why(e)
            printer(f"{PREFIX} native module '{module_name}' not loaded, 'H3 Streamed Blocks' "
                    f"is unavailable (the other H3 nodes work): {_state['reason']}. "
                    "Fix: run the h3stream repository's install.py with ComfyUI's Python (it "
                    "installs the h3stream wheel), or `pip install <h3stream repo>` into it "
                    "(docs/COMFYUI.md).")
    return _state["module"], _state["reason"]


def reset_for_tests():
    _state.update(tried=False, module=None, reason=None)
