"""Stand-ins for the two ComfyUI functions the node's weight hand-over calls
(comfy_weights.py): comfy.ops.cast_bias_weight / uncast_bias_weight and
comfy.model_management.cast_to, behaving like ComfyUI's resident path: the module's own
weight on the input's device, after its weight_function patches (ComfyUI's legacy
low-VRAM LoRA path). Every cast and uncast is recorded, so tests can check that each
cast is handed back. Our own code, written from the behaviour described in
docs/COMFYUI.md; no ComfyUI code."""

import sys
import types

CASTS = []
UNCASTS = []
EVENTS = []  # ("cast" | "uncast", module) in order
# True: a cast returns one shared buffer per shape, overwritten by the next cast of that
# shape (ComfyUI's per-stream cast buffer for offloaded weights).
REUSE_BUFFER = [False]
_BUFFERS = {}


def cast_bias_weight(s, input=None, dtype=None, device=None, bias_dtype=None, offloadable=False,
                     compute_dtype=None, want_requant=False):
    weight = s.weight
    if device is None and input is not None:
        device = input.device
    if device is not None:
        weight = weight.to(device)
    for f in getattr(s, "weight_function", []) or []:
        weight = f(weight)
    if REUSE_BUFFER[0]:
        buf = _BUFFERS.setdefault((tuple(weight.shape), weight.dtype), weight.detach().clone())
        buf.copy_(weight)
        weight = buf
    bias = getattr(s, "bias", None)
    CASTS.append(s)
    EVENTS.append(("cast", s))
    return weight, bias, None


def uncast_bias_weight(s, weight, bias, offload_stream):
    UNCASTS.append(s)
    EVENTS.append(("uncast", s))


def cast_to(weight, dtype=None, device=None, **kwargs):
    return weight.to(device=device) if device is not None else weight


def install(monkeypatch):
    """comfy.ops and comfy.model_management for the rest of the test."""
    if "comfy" not in sys.modules:
        monkeypatch.setitem(sys.modules, "comfy", types.ModuleType("comfy"))
    ops = types.ModuleType("comfy.ops")
    ops.cast_bias_weight = cast_bias_weight
    ops.uncast_bias_weight = uncast_bias_weight
    mm = types.ModuleType("comfy.model_management")
    mm.cast_to = cast_to
    monkeypatch.setitem(sys.modules, "comfy.ops", ops)
    monkeypatch.setitem(sys.modules, "comfy.model_management", mm)
    monkeypatch.setattr(sys.modules["comfy"], "ops", ops, raising=False)
    monkeypatch.setattr(sys.modules["comfy"], "model_management", mm, raising=False)
    CASTS.clear()
    UNCASTS.clear()
    EVENTS.clear()
    REUSE_BUFFER[0] = False
    _BUFFERS.clear()
