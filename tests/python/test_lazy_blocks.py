"""Lazy engines: built without the DiT blocks' data, given one block's tensors per call
(what the ComfyUI node does, so h3stream never holds a second copy of the model)."""
import pytest
import torch
from safetensors.torch import load_file

import h3stream
from conftest import FORMATS, bits, block_inputs, needs_cuda, streamed_options


@pytest.mark.parametrize("fmt", FORMATS)
def test_lazy_block_equals_full_engine_bit_for_bit(engine, checkpoint, fmt):
    full = engine(fmt)
    sd = load_file(str(checkpoint(fmt)))
    lazy = h3stream.Engine.from_tensors(sd, lazy_blocks=True, threads=2)
    assert lazy.config == full.config
    x, t_emb, runs, rope = block_inputs(full.config, 97, seed=11)
    for i in range(full.config["blocks"]):
        assert not lazy.block_loaded(i)
        with pytest.raises(ValueError, match=f"block {i}'s weights are not loaded"):
            lazy.run_block(i, x.clone(), t_emb, runs, rope)
        block = {k: v for k, v in sd.items() if k.startswith(f"blocks.{i}.")}
        lazy.load_block(i, block)
        assert lazy.block_loaded(i)
        for mode in ("stock", "streamed"):
            want, got = x.clone(), x.clone()
            opts = streamed_options(q_chunk=13, kv_chunk=29, mlp_chunk=31)
            assert full.run_block(i, want, t_emb, runs, rope, mode=mode, options=opts) == mode
            assert lazy.run_block(i, got, t_emb, runs, rope, mode=mode, options=opts) == mode
            assert torch.equal(bits(got), bits(want)), (fmt, i, mode)
        lazy.drop_block(i)
        assert not lazy.block_loaded(i)


def test_load_block_refuses_the_wrong_tensors(checkpoint):
    sd = load_file(str(checkpoint("int8")))
    lazy = h3stream.Engine.from_tensors(sd, lazy_blocks=True, threads=2)
    block1 = {k: v for k, v in sd.items() if k.startswith("blocks.1.")}
    with pytest.raises(ValueError, match="no tensor of block 0"):
        lazy.load_block(0, block1)
    stray = dict(block1, **{"blocks.0.norm1.weight": sd["blocks.0.norm1.weight"]})
    with pytest.raises(ValueError, match="not part of DiT block 1"):
        lazy.load_block(1, stray)
    with pytest.raises(ValueError, match="out of range"):
        lazy.load_block(7, block1)


@needs_cuda
def test_lazy_blocks_on_the_gpu_reload_without_stale_device_copies(checkpoint):
    """Blocks loaded and dropped in turn on one CUDA engine: new host vectors may reuse
    freed addresses, so any device copy keyed by address must have been dropped (a stale
    norm weight once gave block 1 block 0's norms)."""
    sd = load_file(str(checkpoint("int8")))
    full = h3stream.Engine.from_tensors(sd, backend="cuda")
    lazy = h3stream.Engine.from_tensors(sd, backend="cuda", lazy_blocks=True)
    x, t_emb, runs, rope = block_inputs(full.config, 300, seed=12)
    x, t_emb, rope = x.cuda(), t_emb.cuda(), rope.cuda()
    for rnd in range(2):
        for i in range(full.config["blocks"]):
            block = {k: v.cuda() for k, v in sd.items() if k.startswith(f"blocks.{i}.")}
            lazy.load_block(i, block)
            want, got = x.clone(), x.clone()
            opts = streamed_options(q_chunk=64, kv_chunk=64, mlp_chunk=64)
            assert full.run_block(i, want, t_emb, runs, rope, options=opts) == "streamed"
            assert lazy.run_block(i, got, t_emb, runs, rope, options=opts) == "streamed"
            torch.cuda.synchronize()
            assert torch.equal(bits(got.cpu()), bits(want.cpu())), (rnd, i)
            lazy.drop_block(i)
