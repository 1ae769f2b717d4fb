"""Streamed == stock, bit for bit, through the Python API."""

import pytest
import torch

import h3stream
from conftest import FORMATS, bits, block_inputs


def run(eng, index, inputs, mode, options=None):
    x, t_emb, runs, rope = inputs
    out = x.clone()
    eng.run_block(index, out, t_emb, runs, rope, mode=mode, options=options)
    return out


# (tokens, q_chunk, kv_chunk, mlp_chunk, kv_block): 1-row tails (67 = 6 x 11 + 1
# = 2 x 33 + 1), one-row query chunks, primes, K/V blocks past one tile.
AWKWARD = [
    (67, 1, 11, 33, 0),
    (67, 5, 13, 7, 0),
    (131, 17, 1, 1, 0),
    (300, 29, 37, 41, 128),
]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seq,q,kv,mlp,kv_block", AWKWARD)
def test_streamed_equals_stock(engine, fmt, seq, q, kv, mlp, kv_block):
    eng = engine(fmt)
    inputs = block_inputs(eng.config, seq, seed=seq + q)
    stock = run(eng, 1, inputs, "stock")
    opts = h3stream.Options(q_chunk=q, kv_chunk=kv, mlp_chunk=mlp, kv_block=kv_block,
                            merge_tail_below=0)
    streamed = run(eng, 1, inputs, "streamed", opts)
    assert not torch.equal(bits(stock), bits(inputs[0])), "the block changed nothing"
    assert torch.isfinite(stock.float()).all()
    assert torch.equal(bits(streamed), bits(stock))


@pytest.mark.parametrize("fmt", FORMATS)
def test_curve_time_form_streamed_equals_stock(engine, fmt):
    eng = engine(fmt, "curve")
    assert eng.config["time_form"] == "curve"
    inputs = block_inputs(eng.config, 67, seed=3)
    assert inputs[1].dtype == torch.float32
    stock = run(eng, 0, inputs, "stock")
    streamed = run(eng, 0, inputs, "streamed",
                   h3stream.Options(q_chunk=3, kv_chunk=11, mlp_chunk=33, merge_tail_below=0))
    assert torch.equal(bits(streamed), bits(stock))


def test_default_options_chunk_and_agree(engine):
    eng = engine("int8")
    inputs = block_inputs(eng.config, 200, seed=11)
    assert torch.equal(bits(run(eng, 0, inputs, "streamed")), bits(run(eng, 0, inputs, "stock")))


def test_blocks_differ_and_runs_are_deterministic(engine):
    eng = engine("bf16")
    inputs = block_inputs(eng.config, 67, seed=5)
    a0 = run(eng, 0, inputs, "streamed")
    a1 = run(eng, 1, inputs, "streamed")
    assert not torch.equal(bits(a0), bits(a1)), "block 0 and block 1 gave the same output"
    assert torch.equal(bits(run(eng, 0, inputs, "streamed")), bits(a0))


def test_modulation_rows_matter(engine):
    eng = engine("bf16")
    x, t_emb, runs, rope = block_inputs(eng.config, 67, seed=8)
    other = [(a, b, (r + 1) % 6) for a, b, r in runs]
    y0, y1 = x.clone(), x.clone()
    eng.run_block(0, y0, t_emb, runs, rope)
    eng.run_block(0, y1, t_emb, other, rope)
    assert not torch.equal(bits(y0), bits(y1))


@pytest.mark.parametrize("fmt", FORMATS)
def test_from_tensors_equals_from_checkpoint(engine, checkpoint, fmt):
    from safetensors.torch import load_file

    path = checkpoint(fmt)
    tensors = load_file(str(path))
    if fmt == "w4a8":  # the float8 scales travel as torch.float8_e4m3fn
        assert any(t.dtype == torch.float8_e4m3fn for t in tensors.values())
    # ComfyUI's state-dict prefix is accepted.
    tensors = {"model.diffusion_model." + k: v for k, v in tensors.items()}
    from_tensors = h3stream.Engine.from_tensors(tensors, threads=2)
    from_file = engine(fmt)
    assert from_tensors.config == from_file.config
    inputs = block_inputs(from_file.config, 67, seed=21)
    opts = h3stream.Options(q_chunk=7, kv_chunk=9, mlp_chunk=10, merge_tail_below=0)
    a = run(from_file, 1, inputs, "streamed", opts)
    b = run(from_tensors, 1, inputs, "streamed", opts)
    assert torch.equal(bits(a), bits(b))


def test_from_tensors_keeps_its_own_copy(checkpoint):
    from safetensors.torch import load_file

    tensors = load_file(str(checkpoint("int8")))
    eng = h3stream.Engine.from_tensors(tensors)
    inputs = block_inputs(eng.config, 40, seed=2)
    before = run(eng, 0, inputs, "streamed")
    for t in tensors.values():  # the caller reuses its memory
        t.zero_()
    del tensors
    assert torch.equal(bits(run(eng, 0, inputs, "streamed")), bits(before))


def test_self_check(engine):
    eng = engine("w4a8")
    x, t_emb, runs, rope = block_inputs(eng.config, 67, seed=4)
    opts = h3stream.Options(q_chunk=5, kv_chunk=11, mlp_chunk=13, merge_tail_below=0)
    x0 = x.clone()
    r = eng.self_check(0, x, t_emb, runs, rope, options=opts)
    assert torch.equal(bits(x), bits(x0)), "self_check modified x"
    assert r["all_equal"] is True
    assert [v["name"] for v in r["variants"]] == ["full", "q_only", "kv_only", "mlp_only", "none"]
    assert all(v["max_ulp"] == 0 for v in r["variants"])
    opts.self_check = True
    eng.run_block(0, x, t_emb, runs, rope, options=opts)
    assert "bit-equal" in eng.last_self_check
    assert not torch.equal(bits(x), bits(x0))


def test_ledger_and_peak(engine):
    eng = engine("bf16")
    inputs = block_inputs(eng.config, 512, seed=9)
    eng.reset_ledger()
    run(eng, 1, inputs, "stock")
    stock_peak = eng.arena_peak()
    phases = [(e["block"], e["phase"]) for e in eng.ledger()]
    assert [p for p in phases if p[0] == 1] == [(1, "setup"), (1, "kv"), (1, "attn"), (1, "mlp")]
    eng.reset_ledger()
    run(eng, 1, inputs, "streamed", h3stream.Options(q_chunk=64, kv_chunk=64, mlp_chunk=64))
    streamed_peak = eng.arena_peak()
    ledger = eng.ledger()
    assert all(e["peak"] >= e["allocated_at_start"] for e in ledger)
    assert max(e["peak"] for e in ledger) == streamed_peak
    assert 0 < streamed_peak < stock_peak
    assert eng.arena_allocated() == 0  # nothing lives between calls


@pytest.mark.parametrize("fmt", FORMATS)
def test_attention_half_streamed_equals_stock(engine, fmt):
    """phases="attn": only x += gate_msa * attn(...); streamed == stock, and it is
    the first half of the full block (the full block changes x further)."""
    eng = engine(fmt)
    x, t_emb, runs, rope = block_inputs(eng.config, 67, seed=13)
    stock, streamed, full = x.clone(), x.clone(), x.clone()
    eng.run_block(0, stock, t_emb, runs, rope, mode="stock", phases="attn")
    eng.reset_ledger()
    eng.run_block(0, streamed, t_emb, runs, rope, phases="attn",
                  options=h3stream.Options(q_chunk=3, kv_chunk=11, merge_tail_below=0))
    assert [e["phase"] for e in eng.ledger() if e["block"] == 0] == ["setup", "kv", "attn"]
    eng.run_block(0, full, t_emb, runs, rope, mode="stock")
    assert torch.equal(bits(streamed), bits(stock))
    assert not torch.equal(bits(stock), bits(x)) and not torch.equal(bits(stock), bits(full))
