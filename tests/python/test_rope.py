"""rope_from_comfy: ComfyUI's rotation table -> the engine's (cos, sin) pairs."""

import numpy as np
import pytest
import torch

import h3stream


def comfy_rotation_table(angles, dtype):
    """ComfyUI's rope_rotation_table (comfy/ldm/minimax_h3/model.py)."""
    half = angles.shape[-1] // 2
    ang = angles[:, :half]
    c, s = torch.cos(ang), torch.sin(ang)
    table = torch.stack([c, -s, s, c], dim=-1).reshape(1, angles.shape[0], 1, half, 2, 2)
    return table.to(dtype)


def test_pairs_are_cos_sin_bits():
    g = torch.Generator().manual_seed(0)
    half = torch.rand(37, 48, generator=g) * 100
    angles = torch.cat([half, half], dim=-1)
    table = comfy_rotation_table(angles, torch.bfloat16)
    rope = h3stream.rope_from_comfy(table)
    assert rope.shape == (37, 48, 2) and rope.is_contiguous() and rope.dtype == torch.bfloat16
    want = torch.stack([torch.cos(half), torch.sin(half)], dim=-1).to(torch.bfloat16)
    assert torch.equal(rope.view(torch.int16), want.view(torch.int16))


def test_numpy_tables():
    t = np.arange(1 * 5 * 1 * 3 * 2 * 2, dtype=np.float32).reshape(1, 5, 1, 3, 2, 2)
    r = h3stream.rope_from_comfy(t)
    assert r.shape == (5, 3, 2) and r.flags["C_CONTIGUOUS"]
    assert (r == t[0, :, 0, :, :, 0]).all()


def test_bad_shape():
    with pytest.raises(ValueError, match=r"rope_freqs: shape \[5, 48, 2\] is not ComfyUI's"):
        h3stream.rope_from_comfy(torch.zeros(5, 48, 2))
