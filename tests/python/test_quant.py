"""h3stream.convrot_quantize against comfy-kitchen's CUDA quantiser (golden vectors)."""
import os

import pytest
import torch
from safetensors.torch import load_file

import h3stream

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "data", "golden", "ck_convrot_quant.safetensors")


def test_every_golden_case_bit_equal():
    g = load_file(GOLDEN)
    cases = sorted({k.rsplit(".", 1)[0] for k in g})
    assert len(cases) >= 10, cases
    for c in cases:
        q, scale = h3stream.convrot_quantize(g[c + ".x"])
        assert torch.equal(q, g[c + ".q"]), f"{c}: q differs in {(q != g[c + '.q']).sum()} places"
        # Compare bits, not values (0.0 vs -0.0, NaN would slip through ==).
        assert torch.equal(scale.view(torch.int32), g[c + ".scale"].view(torch.int32)), c


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="multiple of 256"):
        h3stream.convrot_quantize(torch.zeros(2, 100, dtype=torch.bfloat16))
    with pytest.raises(TypeError, match="x"):
        h3stream.convrot_quantize(torch.zeros(2, 256, dtype=torch.float32))
