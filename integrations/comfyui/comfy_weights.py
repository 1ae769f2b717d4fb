"""A DiT block's weights exactly as ComfyUI hands them to its own modules for one call,
in the checkpoint's key names, for h3stream's Engine.run_block(weights=...).

Every linear and norm goes through comfy.ops.cast_bias_weight, the call ComfyUI's own
layers make: it moves offloaded weights to the GPU through ComfyUI's pinned buffers and
offload stream (low-VRAM and dynamic-VRAM modes), applies on-the-fly patches (LoRA in
low-VRAM mode: dequantised, patched, and requantised as ComfyUI does in dynamic mode or
left bf16 as its legacy low-VRAM path runs it), and returns resident weights as they
are. q_norm and k_norm are cast like ComfyUI's attention casts them.

A cast that returns the module's own resident tensors is used in place by the engine (no
copy) and handed back with uncast_bias_weight after the call. A cast that returns a
temporary (an offloaded weight in ComfyUI's cast buffer, which its next cast may reuse; a
dynamic-VRAM slot; a patched weight) is copied on the GPU, in the compute stream's order
after ComfyUI's transfer, and handed back at once, as ComfyUI's own layers hand each cast
back before the next: the engine then holds at most one block of weights beside ComfyUI's.
"""

import contextlib
import json

LINEARS = ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2", "adaln_proj.linear")
NORMS = ("norm1", "norm2")
QK_NORMS = ("attn.q_norm", "attn.k_norm")


def unsupported(block):
    """Why h3stream cannot take this block's weights from ComfyUI, or None."""
    for name, mod in block.named_modules():
        if "forward" in getattr(mod, "__dict__", {}):  # bypass LoRA replaces forward itself
            return f"{name} has its forward replaced (a bypass patch)"
    return None


def _quantized(t):
    return hasattr(t, "_qdata") and hasattr(t, "_params")


def _comfy_quant(module, weight):
    """The layer's comfy_quant JSON (uint8 tensor), as ComfyUI's state_dict writes it."""
    import torch

    fmt = getattr(module, "quant_format", None)
    params = weight._params
    if fmt is None:  # name the format after the layout
        fmt = {"TensorWiseINT8Layout": "int8_tensorwise",
               "AsymW4A8Int8Layout": "asym_w4a8_int8"}.get(str(weight._layout_cls), str(fmt))
    conf = {"format": fmt}
    if fmt == "int8_tensorwise" and getattr(params, "convrot", False):
        conf["convrot"] = True
        conf["convrot_groupsize"] = getattr(params, "convrot_groupsize", 256)
    elif fmt == "asym_w4a8_int8":
        conf["group_size"] = getattr(params, "group_size", 16)
        conf["convrot_groupsize"] = getattr(params, "convrot_groupsize", 256)
    return torch.tensor(list(json.dumps(conf).encode("utf-8")), dtype=torch.uint8)


# The formats h3stream quantises like ComfyUI; a layer of one of them flagged for a full
# precision matmul is handed over dequantised. (nvfp4 multiplies as bf16 on every GPU
# h3stream runs: it keeps its own in-place decode.)
_CONVROT_FORMATS = ("int8_tensorwise", "asym_w4a8_int8")


def _full_precision(module, weight):
    """True when ComfyUI's forward dequantises this layer's weight and multiplies in bf16
    (its quant config's full_precision_matrix_mult, or a format disabled on this GPU)."""
    if not getattr(module, "_full_precision_mm", False):
        return False
    fmt = getattr(module, "quant_format", None)
    if fmt is None:
        fmt = {"TensorWiseINT8Layout": "int8_tensorwise",
               "AsymW4A8Int8Layout": "asym_w4a8_int8"}.get(str(weight._layout_cls))
    return fmt in _CONVROT_FORMATS


def _dequantised(weight):
    """The bf16 weight ComfyUI's own forward multiplies with: its dequantize()."""
    import torch

    w = weight.dequantize()
    return w if w.dtype == torch.bfloat16 else w.to(torch.bfloat16)


def _storage_ptr(t):
    return (t._qdata if _quantized(t) else t).data_ptr()


def _own(module, tensor, attr="weight"):
    """True when a cast returned the module's own tensor (resident): safe to keep for the
    whole call without a copy."""
    own = getattr(module, attr, None)
    return (tensor is own or (own is not None and tensor is not None
                              and own.device == tensor.device
                              and _storage_ptr(own) == _storage_ptr(tensor)))


def linear_tensors(prefix, module, weight, bias):
    """{key: tensor} of one linear in the checkpoint's names: a QuantizedTensor's raw
    data and scales (its own state_dict) with the comfy_quant config, or a dense weight
    (also a quantised layer ComfyUI runs at full precision: its dequantize())."""
    out = {}
    if _quantized(weight) and _full_precision(module, weight):
        out[f"{prefix}.weight"] = _dequantised(weight)
    elif _quantized(weight):
        out.update(weight.state_dict(f"{prefix}.weight"))
        out[f"{prefix}.comfy_quant"] = _comfy_quant(module, weight)
    else:
        out[f"{prefix}.weight"] = weight
    if bias is not None:
        out[f"{prefix}.bias"] = bias
    return out


@contextlib.contextmanager
def block_weights(block, index, x, mlp=True):
    """Yields {key: tensor} of DiT block `index` for a call on `x`, cast by ComfyUI for
    this call, and hands the casts back on exit. mlp=False: fc1/fc2 come from the
    module's state_dict uncast (the caller runs the model's own MLP, which casts them
    itself; h3stream does not read them)."""
    import comfy.model_management as mm
    import comfy.ops

    casts, out = [], {}
    p = f"blocks.{index}"

    def take(mod, cast, tensors):
        """Keep the module's own tensors (handed back after the call); copy a temporary
        cast and hand it back now, before the next cast may reuse its buffer."""
        w, b, offload = cast
        if _own(mod, w) and (b is None or _own(mod, b, "bias")):
            casts.append((mod, w, b, offload))
            out.update(tensors)
        else:
            out.update({k: (v.clone() if v.device == x.device else v) for k, v in tensors.items()})
            comfy.ops.uncast_bias_weight(mod, w, b, offload)

    try:
        for name in LINEARS:
            mod = block.get_submodule(name)
            if not mlp and name.startswith("mlp."):
                out.update({f"{p}.{name}.{k}": v for k, v in mod.state_dict().items()})
                continue
            # The cast of ComfyUI's quantised Linear (ops.MixedPrecisionOps): the weight in
            # its stored dtype, requantised after an on-the-fly patch.
            cast = comfy.ops.cast_bias_weight(
                mod, None, dtype=mod.weight.dtype, device=x.device, bias_dtype=x.dtype,
                offloadable=True, compute_dtype=x.dtype, want_requant=True)
            take(mod, cast, linear_tensors(f"{p}.{name}", mod, cast[0], cast[1]))
        for name in NORMS:
            mod = block.get_submodule(name)
            cast = comfy.ops.cast_bias_weight(mod, x, offloadable=True)
            take(mod, cast, {f"{p}.{name}.weight": cast[0]})
        for name in QK_NORMS:  # ComfyUI's attention casts these directly
            out[f"{p}.{name}.weight"] = mm.cast_to(block.get_submodule(name).weight,
                                                   device=x.device)
        yield out
    finally:
        out.clear()
        for mod, w, b, offload in reversed(casts):
            comfy.ops.uncast_bias_weight(mod, w, b, offload)
