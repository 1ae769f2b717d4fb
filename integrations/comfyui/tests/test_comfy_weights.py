"""comfy_weights.linear_tensors: what the node hands h3stream for one linear, from stand-ins
for ComfyUI's QuantizedTensor (the attributes comfy_weights reads: _qdata, _params,
_layout_cls, state_dict, dequantize)."""

import importlib
import json
import types

from conftest import load_pack, need

torch = need("torch")


class FakeQuantized:
    """A QuantizedTensor stand-in: int8 codes and a per-row scale, dequantised as q * s."""

    def __init__(self, layout="TensorWiseINT8Layout"):
        self._qdata = torch.tensor([[1, -2], [3, 4]], dtype=torch.int8)
        self._scale = torch.tensor([[0.5], [2.0]])
        self._layout_cls = layout
        self._params = types.SimpleNamespace(convrot=True, convrot_groupsize=256, group_size=16)

    def state_dict(self, prefix):
        return {prefix: self._qdata, prefix + "_scale": self._scale}

    def dequantize(self):
        return (self._qdata.float() * self._scale).to(torch.bfloat16)


def module(full_precision=None, fmt=None):
    m = types.SimpleNamespace()
    if full_precision is not None:
        m._full_precision_mm = full_precision
    if fmt is not None:
        m.quant_format = fmt
    return m


def pack():
    load_pack()
    return importlib.import_module("h3s_comfyui_pack.comfy_weights")


def test_a_quantised_layer_goes_over_as_its_codes_and_config():
    cw = pack()
    w = FakeQuantized()
    out = cw.linear_tensors("blocks.0.mlp.fc2", module(), w, None)
    assert set(out) == {"blocks.0.mlp.fc2.weight", "blocks.0.mlp.fc2.weight_scale",
                        "blocks.0.mlp.fc2.comfy_quant"}
    assert out["blocks.0.mlp.fc2.weight"] is w._qdata
    conf = json.loads(bytes(out["blocks.0.mlp.fc2.comfy_quant"].tolist()).decode())
    assert conf == {"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 256}
    # The flag off changes nothing.
    assert set(cw.linear_tensors("l", module(False), w, None)) == {"l.weight", "l.weight_scale",
                                                                   "l.comfy_quant"}


def test_a_full_precision_layer_goes_over_as_comfyuis_dequantisation():
    cw = pack()
    bias = torch.ones(2, dtype=torch.bfloat16)
    for layout, fmt in (("TensorWiseINT8Layout", None), ("AsymW4A8Int8Layout", None),
                        ("Other", "int8_tensorwise"), ("Other", "asym_w4a8_int8")):
        w = FakeQuantized(layout)
        out = cw.linear_tensors("blocks.1.attn.qkv_proj", module(True, fmt), w, bias)
        assert set(out) == {"blocks.1.attn.qkv_proj.weight", "blocks.1.attn.qkv_proj.bias"}, layout
        got = out["blocks.1.attn.qkv_proj.weight"]
        assert got.dtype == torch.bfloat16
        assert torch.equal(got, w.dequantize()), layout
        assert out["blocks.1.attn.qkv_proj.bias"] is bias


def test_nvfp4_keeps_h3streams_own_decode_under_the_flag():
    cw = pack()
    out = cw.linear_tensors("l", module(True, "nvfp4"), FakeQuantized("TensorCoreNVFP4Layout"),
                            None)
    assert "l.comfy_quant" in out and out["l.weight"].dtype == torch.int8
