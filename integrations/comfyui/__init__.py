"""h3stream nodes for ComfyUI (copy or symlink this folder into ComfyUI/custom_nodes/).

H3 Streamed Blocks needs the native module `h3stream` (pip install the h3stream
repository into ComfyUI's Python). When it cannot load, the other nodes still
load and the console shows exactly one line saying why.
"""

from . import h3_native
from .nodes_memory import H3MemoryProbe
from .nodes_precision import H3PrecisionProbe
from .nodes_util import H3EvictTextEncoder, H3FreeCache

NODE_CLASS_MAPPINGS = {
    "H3MemoryProbe": H3MemoryProbe,
    "H3PrecisionProbe": H3PrecisionProbe,
    "H3FreeCache": H3FreeCache,
    "H3EvictTextEncoder": H3EvictTextEncoder,
}
NODE_DISPLAY_NAME_MAPPINGS = {
    "H3MemoryProbe": "H3 Memory Probe",
    "H3PrecisionProbe": "H3 Precision Probe",
    "H3FreeCache": "H3 Free Cache",
    "H3EvictTextEncoder": "H3 Evict Text Encoder",
}

_h3, _why = h3_native.load()
if _h3 is not None:
    from .nodes_streamed import H3StreamedBlocks

    NODE_CLASS_MAPPINGS["H3StreamedBlocks"] = H3StreamedBlocks
    NODE_DISPLAY_NAME_MAPPINGS["H3StreamedBlocks"] = "H3 Streamed Blocks"

__all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS"]
