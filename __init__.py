"""The repository root as a ComfyUI node pack: cloned into ComfyUI/custom_nodes/ (by hand,
ComfyUI-Manager or the Comfy Registry), ComfyUI loads this file, which hands over the nodes
of integrations/comfyui (docs/COMFYUI.md). The native module comes from the h3stream wheel
(install.py); without it the pack loads minus 'H3 Streamed Blocks' and prints one line.
"""

import os
import sys

if __name__ == "h3stream":
    # This folder was imported by its folder name, as if it were the installed module
    # (its parent folder on sys.path: a shell in custom_nodes/, pytest's rootdir package):
    # hand over to the installed h3stream, or say there is none.
    import importlib.machinery
    import importlib.util

    _parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    _path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _parent]
    _spec = importlib.machinery.PathFinder.find_spec(__name__, _path)
    if _spec is None:
        raise ImportError("h3stream: this folder is the h3stream repository (a ComfyUI node "
                          "pack), not the h3stream module, and no module is installed: install "
                          "the wheel (install.py) or run `pip install .` here")
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[__name__] = _module  # what `import h3stream` returns
    _spec.loader.exec_module(_module)
else:
    # The pack by its path, as this module's child: ComfyUI names this module by the
    # folder's path, but pytest collecting from the root may import it with no package
    # (a folder name that is no identifier), where a relative import fails.
    import importlib.util

    _pack_init = os.path.join(os.path.dirname(os.path.abspath(__file__)), "integrations",
                              "comfyui", "__init__.py")
    _spec = importlib.util.spec_from_file_location(f"{__name__}.integrations.comfyui", _pack_init)
    _pack = importlib.util.module_from_spec(_spec)
    sys.modules[_spec.name] = _pack
    _spec.loader.exec_module(_pack)
    NODE_CLASS_MAPPINGS = _pack.NODE_CLASS_MAPPINGS
    NODE_DISPLAY_NAME_MAPPINGS = _pack.NODE_DISPLAY_NAME_MAPPINGS

    __all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
