"""Engine.forward: the whole model on real inputs (ComfyUI's MiniMaxH3Model.forward
semantics; its C++ tests restate every step, scripts/comfyui_forward_check.py compares
with ComfyUI itself). Here: streamed == stock through Python for every format, a
ComfyUI-layout checkpoint written by the safetensors package loads and gives the
same bits, torch tensors in and out, the keyframe noise against torch's own
generator, and argument errors."""

import math

import pytest
import torch
from safetensors.torch import load_file, save_file

import h3stream
from h3stream import _native

from conftest import FORMATS, bits


def inputs(cfg, t=2, h=5, w=6, frames=7, text=9, cond=0, seed=0):
    g = torch.Generator().manual_seed(seed)
    video = torch.randn(1, cfg["video_latent"], t, h, w, generator=g).to(torch.bfloat16)
    audio = torch.randn(1, cfg["audio_latent"], 2, frames, generator=g).to(torch.bfloat16)
    context = (torch.randn(1, text, cfg["text_dim"], generator=g) * 0.5).to(torch.bfloat16)
    kw = {}
    if cond:
        kw["cond_latent"] = torch.randn(1, cfg["video_latent"], cond, h + h % 2, w + w % 2,
                                        generator=g).to(torch.bfloat16)
    return video, audio, context, kw


AWKWARD = dict(q_chunk=7, kv_chunk=13, mlp_chunk=5, min_tokens=0, final_layer_chunk=11,
               merge_tail_below=0)


@pytest.mark.parametrize("fmt", FORMATS)
def test_forward_streamed_equals_stock(engine, fmt):
    eng = engine(fmt)
    video, audio, context, kw = inputs(eng.config, cond=1, seed=1)
    sv, sa = eng.forward(video, audio, context, 0.6, mode="stock", **kw)
    assert eng.last_forward["stock_blocks"] == eng.config["blocks"]
    tv, ta = eng.forward(video, audio, context, torch.tensor([0.6]),
                         options=h3stream.Options(**AWKWARD), **kw)
    assert eng.last_forward["streamed_blocks"] == eng.config["blocks"]
    assert sv.shape == video.shape and sa.shape == audio.shape
    assert sv.dtype == torch.bfloat16 and sa.dtype == torch.bfloat16
    assert torch.equal(bits(sv), bits(tv)) and torch.equal(bits(sa), bits(ta))
    assert torch.isfinite(sv.float()).all() and torch.isfinite(sa.float()).all()
    assert not eng.last_forward["kv_on_host"]
    # the K/V staged in host memory: the same bits, and the bytes really moved
    hv, ha = eng.forward(video, audio, context, 0.6,
                         options=h3stream.Options(**AWKWARD, kv_placement="host"), **kw)
    assert eng.last_forward["kv_on_host"] and "host-staged" in eng.last_forward["placement"]
    assert eng.last_forward["staged_to_host_bytes"] > 0
    assert eng.last_forward["staged_to_device_bytes"] >= eng.last_forward["staged_to_host_bytes"]
    assert torch.equal(bits(sv), bits(hv)) and torch.equal(bits(sa), bits(ha))
    # the prediction depends on sigma (a pipeline of zeros cannot pass)
    uv, _ = eng.forward(video, audio, context, 0.3, mode="stock", **kw)
    assert not torch.equal(bits(uv), bits(sv))


def test_float32_latents_give_float32_predictions(engine):
    eng = engine("int8")
    video, audio, context, _ = inputs(eng.config, seed=2)
    v, a = eng.forward(video.float(), audio.float(), context, 0.5, audio_scale=1.0)
    assert v.dtype == torch.float32 and a.dtype == torch.float32
    assert v.shape == video.shape


@pytest.mark.parametrize("fmt", ["bf16", "int8"])
def test_checkpoint_written_by_the_safetensors_package(checkpoint, tmp_path, fmt):
    """An independent writer (safetensors.torch.save_file, ComfyUI's key prefix) gives a
    file that loads and runs to the same bits as h3stream's own file and its state dict."""
    ours = checkpoint(fmt)
    sd = load_file(str(ours))
    from safetensors import safe_open
    with safe_open(str(ours), framework="pt") as f:
        metadata = f.metadata() or {}
    theirs = tmp_path / f"comfy_{fmt}.safetensors"
    save_file({"model.diffusion_model." + k: v.contiguous() for k, v in sd.items()}, str(theirs),
              metadata=metadata)
    a = h3stream.Engine.from_checkpoint(str(ours), threads=2)
    b = h3stream.Engine.from_checkpoint(str(theirs), threads=2)
    c = h3stream.Engine.from_tensors(sd, metadata=metadata, threads=2)
    video, audio, context, kw = inputs(a.config, h=4, w=3, seed=3)
    va, aa = a.forward(video, audio, context, 0.8, **kw)
    for e in (b, c):
        v, au = e.forward(video, audio, context, 0.8, **kw)
        assert torch.equal(bits(va), bits(v)) and torch.equal(bits(aa), bits(au))


def test_keyframe_noise_follows_torchs_generator():
    """torch.rand's uniforms bit for bit; torch.randn's normals from the same stream and
    pairing, within what the transcendental functions differ by (measured)."""
    for seed, n in [(0, 16), (3, 96 * 64), (12345, 1000)]:
        g = torch.Generator("cpu").manual_seed(seed)
        assert _native._torch_cpu_rand(seed, n) == torch.rand(n, generator=g).tolist()
        g = torch.Generator("cpu").manual_seed(seed)
        want = torch.randn(n, generator=g)
        got = torch.tensor(_native._torch_cpu_randn(seed, n))
        diff = (got - want).abs()
        # the same sample (not another draw): within a few fp32 ulps of |x| <= ~5
        assert float(diff.max()) <= 2e-6, (seed, n, float(diff.max()))
        print(f"randn seed {seed} n {n}: {int((diff > 0).sum())} of {n} values differ, "
              f"max {float(diff.max()):.2e}")


def test_bad_arguments_are_named(engine):
    eng = engine("bf16")
    video, audio, context, _ = inputs(eng.config)
    with pytest.raises(ValueError, match=r"sigma = nan"):
        eng.forward(video, audio, context, math.nan)
    with pytest.raises(ValueError, match=r"context has shape .*text_dim"):
        eng.forward(video, audio, context[..., :-1].contiguous(), 0.5)
    with pytest.raises(ValueError, match=r"video_latent has .* channels"):
        eng.forward(video[:, :-1].contiguous(), audio, context, 0.5)
    with pytest.raises(ValueError, match=r"context has dtype f32, expected bf16"):
        eng.forward(video, audio, context.float(), 0.5)
    with pytest.raises(ValueError, match=r"mode 'fast' is not valid"):
        eng.forward(video, audio, context, 0.5, mode="fast")
    with pytest.raises(ValueError, match=r"sigma: expected one value"):
        eng.forward(video, audio, context, torch.tensor([0.5, 0.6]))
