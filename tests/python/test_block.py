"""Streamed == stock, bit for bit, through the Python API; min_tokens picks the path."""

import pytest
import torch

import h3stream
from conftest import (FORMATS, assert_really_chunks, bits, block_inputs, phase_peaks, run_block,
                      streamed_options)

run = run_block

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
    opts = streamed_options(q_chunk=q, kv_chunk=kv, mlp_chunk=mlp, kv_block=kv_block)
    streamed = assert_really_chunks(eng, 1, inputs, opts)
    assert not torch.equal(bits(stock), bits(inputs[0])), "the block changed nothing"
    assert torch.isfinite(stock.float()).all()
    assert torch.equal(bits(streamed), bits(stock))


@pytest.mark.parametrize("tier", ["kvi8r", "kvi8s", "kvfp4s", "kvmix"])
def test_kv_tiers_streamed_equal_their_stock(engine, tier):
    """Each approximate K/V store through Options(kv_store=...): the streamed block equals
    the same tier's stock block bit for bit, and differs from the exact store's block."""
    eng = engine("int8")
    inputs = block_inputs(eng.config, 300, seed=11)
    exact = run(eng, 0, inputs, "stock")
    stock = run(eng, 0, inputs, "stock", h3stream.Options(kv_store=tier))
    opts = streamed_options(kv_store=tier, q_chunk=29, kv_chunk=37, mlp_chunk=41)
    streamed = run(eng, 0, inputs, "streamed", opts)
    assert torch.equal(bits(streamed), bits(stock)), tier
    assert not torch.equal(bits(stock), bits(exact)), f"{tier} gave the exact store's bits"
    # self_check labels the tier approximate with its error against the exact store.
    r = eng.self_check(0, *inputs, options=opts)
    assert r["all_equal"], r["line"]
    assert r["tier"]["kv_store"] == tier and r["tier"]["approximate"] is True, r
    assert 0.0 < r["tier"]["rel_rms"] < 0.2 and r["tier"]["max_abs"] > 0.0, r
    assert f"kv_store {tier} (approximate)" in r["line"] and "tier_fallback" not in r


def test_kvmix_heads_are_calibrated_on_a_blocks_first_call_and_kept(checkpoint):
    """kvmix without kv_mix_heads: each block's first call picks half the heads (Engine.
    kv_mix_heads shows them) and later calls reuse them; given heads are used as they are and
    a head the model lacks is refused by name."""
    eng = h3stream.Engine.from_checkpoint(checkpoint("int8", "full"), threads=2)  # a fresh one
    heads = eng.config["heads"]
    inputs = block_inputs(eng.config, 300, seed=4)
    assert eng.kv_mix_heads == {}
    mix = h3stream.Options(kv_store="kvmix")
    first = run(eng, 1, inputs, "stock", mix)
    picked = eng.kv_mix_heads
    assert list(picked) == [1] and len(picked[1]) == heads // 2
    run(eng, 1, block_inputs(eng.config, 500, seed=5), "stock", mix)
    assert eng.kv_mix_heads == picked, "a later call kept the first call's heads"
    given = h3stream.Options(kv_store="kvmix", kv_mix_heads=picked[1])
    assert torch.equal(bits(run(eng, 1, inputs, "stock", given)), bits(first))
    with pytest.raises(ValueError, match=f"head {heads} is not a head of this model"):
        run(eng, 1, inputs, "stock", h3stream.Options(kv_store="kvmix", kv_mix_heads=[heads]))
