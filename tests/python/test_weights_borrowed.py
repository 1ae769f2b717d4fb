"""The engine holds no copy of the model: tensors are borrowed (views, kept referenced
only as long as the engine or the call needs them), a checkpoint is mapped, and a call
may bring its block's own tensors (what the ComfyUI node does each call)."""
import gc
import os

import pytest
import torch
from safetensors.torch import load_file

import h3stream
from conftest import FORMATS, bits, block_inputs, needs_cuda, streamed_options


def rss_bytes():
    """Resident set size of this process (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def block_tensors(sd, i):
    return {k: v for k, v in sd.items() if k.startswith(f"blocks.{i}.")}


@pytest.mark.parametrize("fmt", FORMATS)
def test_per_call_weights_equal_the_engines_own(engine, checkpoint, fmt):
    full = engine(fmt)
    sd = load_file(str(checkpoint(fmt)))
    lazy = h3stream.Engine.from_tensors(sd, lazy_blocks=True, threads=2)
    inputs = block_inputs(full.config, 83, seed=3)
    x, t_emb, runs, rope = inputs
    opts = streamed_options(q_chunk=11, kv_chunk=17, mlp_chunk=23)
    for i in range(full.config["blocks"]):
        want, got = x.clone(), x.clone()
        full.run_block(i, want, t_emb, runs, rope, options=opts)
        assert lazy.run_block(i, got, t_emb, runs, rope, options=opts,
                              weights=block_tensors(sd, i)) == "streamed"
        assert torch.equal(bits(got), bits(want)), (fmt, i)
        assert not lazy.block_loaded(i)  # nothing was kept
    r = lazy.self_check(0, x, t_emb, runs, rope, options=opts, weights=block_tensors(sd, 0))
    assert r["all_equal"], r["line"]


def storage_probe(t):
    """Tells when a tensor's memory is freed (not only its Python object: DLPack exports
    reference the storage from C++)."""
    from torch.multiprocessing.reductions import StorageWeakRef

    return StorageWeakRef(t.untyped_storage())


def test_engines_keep_references_only_while_they_need_them(checkpoint):
    sd = load_file(str(checkpoint("int8")))
    # safetensors may share one storage between tensors: probe a private copy.
    sd["blocks.1.mlp.fc1.weight"] = sd["blocks.1.mlp.fc1.weight"].clone()
    probe = storage_probe(sd["blocks.1.mlp.fc1.weight"])
    # A lazy engine keeps the config only.
    lazy = h3stream.Engine.from_tensors(sd, lazy_blocks=True, threads=2)
    x, t_emb, runs, rope = block_inputs(lazy.config, 40, seed=1)
    block = block_tensors(sd, 1)
    del sd
    gc.collect()
    assert not probe.expired()  # `block` still holds it
    lazy.run_block(1, x.clone(), t_emb, runs, rope, weights=block)
    del block
    gc.collect()
    assert probe.expired(), "the engine kept a call's tensor past the call"
    # A full engine keeps what it computes with, and only until it goes.
    sd = load_file(str(checkpoint("int8")))
    sd["blocks.1.mlp.fc1.weight"] = sd["blocks.1.mlp.fc1.weight"].clone()
    probe = storage_probe(sd["blocks.1.mlp.fc1.weight"])
    eng = h3stream.Engine.from_tensors(sd, threads=2)
    del sd
    gc.collect()
    assert not probe.expired(), "the engine dropped a tensor it computes with"
    eng.run_block(1, x.clone(), t_emb, runs, rope)
    del eng
    gc.collect()
    assert probe.expired()


def test_loading_does_not_copy_the_model(tmp_path):
    """Host RSS: building an engine from tensors or a file adds far less than the
    model's bytes (the old engine kept a whole host copy)."""
    path = tmp_path / "tiny8.safetensors"
    h3stream.make_checkpoint(str(path), preset="tiny", format="bf16", blocks=8, seed=3)
    model_bytes = path.stat().st_size
    assert model_bytes > 60 << 20
    sd = load_file(str(path))
    for t in sd.values():  # fault every page in before measuring
        t.sum()
    gc.collect()
    before = rss_bytes()
    eng = h3stream.Engine.from_tensors(sd, threads=2)
    grew = rss_bytes() - before
    assert grew < model_bytes // 10, f"from_tensors grew RSS by {grew} of {model_bytes} bytes"
    del eng, sd
    gc.collect()
    before = rss_bytes()
    eng = h3stream.Engine.from_checkpoint(path, threads=2)
    grew = rss_bytes() - before
    assert grew < model_bytes // 10, f"from_checkpoint grew RSS by {grew} of {model_bytes} bytes"
    assert eng.weight_bytes == 0  # the CPU reads bf16 weights where they are


def test_vram_budget_picks_per_call_preparation(checkpoint):
    path = checkpoint("w4a8")
    roomy = h3stream.Engine.from_checkpoint(path, threads=2)
    tight = h3stream.Engine.from_checkpoint(path, threads=2, vram_budget=1 << 20)
    assert roomy.resident_weights and not tight.resident_weights
    x, t_emb, runs, rope = block_inputs(roomy.config, 50, seed=9)
    a, b = x.clone(), x.clone()
    roomy.run_block(0, a, t_emb, runs, rope)
    tight.run_block(0, b, t_emb, runs, rope)
    assert torch.equal(bits(a), bits(b))
    # The CPU's W4A8 decode: kept by the resident engine, made per call by the tight one.
    assert roomy.weight_bytes > 0
    assert tight.weight_peak_bytes > 0


@needs_cuda
@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_per_call_weights_are_used_in_place(engine, checkpoint, fmt):
    """CUDA tensors handed to a CUDA engine per call: no copy of the weights (the
    engine's weight stores hold at most the 16 W4A8 decode levels and fp32 biases; NVFP4,
    which no kernel reads, is decoded to bf16 on the device from the tensors in place),
    the same bits as the engine's own uploaded weights."""
    sd = load_file(str(checkpoint(fmt)))
    own = h3stream.Engine.from_checkpoint(checkpoint(fmt), backend="cuda")
    lazy = h3stream.Engine.from_tensors(sd, backend="cuda", lazy_blocks=True)
    x, t_emb, runs, rope = block_inputs(own.config, 129, seed=5)
    x, t_emb, rope = x.cuda(), t_emb.cuda(), rope.cuda()
    opts = streamed_options(q_chunk=31, kv_chunk=64, mlp_chunk=100)
    for i in range(own.config["blocks"]):
        block = {k: v.cuda() for k, v in block_tensors(sd, i).items()}
        block_bytes = sum(t.numel() * t.element_size() for t in block.values())
        want, got = x.clone(), x.clone()
        own.run_block(i, want, t_emb, runs, rope, options=opts)
        lazy.run_block(i, got, t_emb, runs, rope, options=opts, weights=block)
        torch.cuda.synchronize()
        assert torch.equal(bits(got.cpu()), bits(want.cpu())), (fmt, i)
        if fmt == "nvfp4":
            # No fp4 kernel: each NVFP4 layer's bf16 decode is made on the device from the
            # packed tensors, read in place like everything else.
            decoded = sum(block[k].shape[0] * block[k].shape[1] * 2 * 2 for k in block
                          if k.endswith(".weight") and k[:-7] + ".weight_scale_2" in block)
            assert decoded <= lazy.weight_peak_bytes < decoded + block_bytes // 20, (
                lazy.weight_peak_bytes, decoded, block_bytes)
        else:
            assert lazy.weight_peak_bytes < block_bytes // 20, (lazy.weight_peak_bytes,
                                                                block_bytes)
    assert own.weight_bytes > 0  # the file's weights were uploaded
