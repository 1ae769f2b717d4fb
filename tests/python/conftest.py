"""Fixtures of the h3stream Python tests: tiny synthetic checkpoints (written
by h3stream.make_checkpoint, the same files as `h3s make-checkpoint`) and
random block inputs built with torch (CPU)."""

import pytest
import torch

import h3stream

FORMATS = ["bf16", "int8", "w4a8"]


@pytest.fixture(scope="session")
def checkpoint(tmp_path_factory):
    """checkpoint(format, time_form="full") -> path of a tiny 2-block model."""
    made = {}

    def make(fmt, time_form="full"):
        key = (fmt, time_form)
        if key not in made:
            path = tmp_path_factory.mktemp("ckpt") / f"tiny_{fmt}_{time_form}.safetensors"
            h3stream.make_checkpoint(str(path), preset="tiny", format=fmt, time_form=time_form,
                                     blocks=2, seed=7)
            made[key] = path
        return made[key]

    return make


@pytest.fixture(scope="session")
def engine(checkpoint):
    """engine(format, time_form="full") -> a CPU Engine from that checkpoint (cached)."""
    made = {}

    def make(fmt, time_form="full"):
        key = (fmt, time_form)
        if key not in made:
            made[key] = h3stream.Engine.from_checkpoint(checkpoint(fmt, time_form), threads=2)
        return made[key]

    return make


def mod_runs_for(seq, timesteps):
    """ComfyUI-like mod_segments: text, an audio run, video split over two timesteps."""
    cuts = sorted({0, min(5, seq), min(9, seq), seq // 2, seq})
    runs = []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        if b > a:
            runs.append((a, b, (i * 4 + 1) % (3 * timesteps)))
    return runs


def block_inputs(cfg, seq, seed=0, timesteps=2):
    """(x, t_emb, mod_runs, rope) for one block call, as ComfyUI would pass them."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(seq, cfg["hidden"], generator=g).to(torch.bfloat16)
    t_dtype = torch.float32 if cfg["time_form"] == "curve" else torch.bfloat16
    t_emb = torch.randn(timesteps, cfg["time_dim"], generator=g).to(t_dtype)
    half = cfg["rope_dim"] // 2
    ang = torch.rand(seq, half, generator=g) * 50.0
    rope = torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1).to(torch.bfloat16).contiguous()
    return x, t_emb, mod_runs_for(seq, timesteps), rope


def bits(t):
    """The raw bits of a bf16 tensor (so -0 vs +0 and NaN payloads count)."""
    return t.contiguous().view(torch.int16)
