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


@pytest.mark.parametrize("tier", ["kvi8r", "kvi8s", "kvfp4s"])
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


@pytest.mark.parametrize("fmt", FORMATS)
def test_host_staged_kv_equals_stock(engine, fmt):
    """kv_placement='host', or a vram_budget the resident store does not fit: the K/V
    go to (pinned) host memory and back in tiles, and the bits stay stock's."""
    eng = engine(fmt)
    seq = 1000
    inputs = block_inputs(eng.config, seq, seed=5)
    stock = run(eng, 0, inputs, "stock")
    store = seq * eng.config["heads"] * 128 * 2 * 2  # K and V, bf16
    small = {"q_chunk": 16, "kv_chunk": 16, "mlp_chunk": 16, "kv_block": 128}
    for kw in ({"kv_placement": "host"}, {"kv_placement": "host", "kv_block": 256},
               {"vram_budget": store, **small}):  # the store alone fills the budget
        opts = streamed_options(**{"q_chunk": 229, "kv_chunk": 137, "mlp_chunk": 241, **kw})
        eng.reset_ledger()
        staged = run(eng, 0, inputs, "streamed", opts)
        assert "host-staged" in eng.last_placement, (kw, eng.last_placement)
        assert torch.equal(bits(staged), bits(stock)), kw
        info = eng.last_placement_info
        assert info["kv"] == "host-staged" and info["staged_to_host_bytes"] == store
        assert info["staged_to_device_bytes"] >= store
        # the planner's predicted own peak per phase bounds the arena's measured one
        for e in eng.ledger():
            if e["phase"] in ("kv", "attn", "mlp"):
                predicted = info["predicted_peaks"][e["phase"]]
                assert 0.9 * predicted <= e["peak"] <= predicted, (kw, e, predicted)
    run(eng, 0, inputs, "streamed", streamed_options(vram_budget=4 * store))
    assert "K/V resident" in eng.last_placement
    # a budget below the smallest placement is refused, naming it
    with pytest.raises(MemoryError, match="vram_budget 1.0 KiB cannot hold this block call"):
        run(eng, 0, inputs, "streamed", streamed_options(vram_budget=1024))


@pytest.mark.parametrize("fmt", FORMATS)
def test_curve_time_form_streamed_equals_stock(engine, fmt):
    eng = engine(fmt, "curve")
    assert eng.config["time_form"] == "curve"
    inputs = block_inputs(eng.config, 67, seed=3)
    assert inputs[1].dtype == torch.float32
    stock = run(eng, 0, inputs, "stock")
    streamed = assert_really_chunks(eng, 0, inputs,
                                    streamed_options(q_chunk=3, kv_chunk=11, mlp_chunk=33))
    assert torch.equal(bits(streamed), bits(stock))


# 200 tokens, every chunk below it: 199 leaves 1-row K/V and MLP tails (the balanced
# query plan splits 100 + 100), primes, a 1-row K/V chunk with K/V blocks of one tile.
@pytest.mark.parametrize("q,kv,mlp,kv_block", [
    (199, 199, 199, 0),
    (13, 37, 101, 0),
    (97, 1, 199, 128),
])
def test_chunks_below_the_sequence_agree_with_stock(engine, q, kv, mlp, kv_block):
    eng = engine("int8")
    inputs = block_inputs(eng.config, 200, seed=11)
    opts = streamed_options(q_chunk=q, kv_chunk=kv, mlp_chunk=mlp, kv_block=kv_block)
    streamed = assert_really_chunks(eng, 0, inputs, opts)
    assert torch.equal(bits(streamed), bits(run(eng, 0, inputs, "stock")))


def test_default_options_run_stock_below_min_tokens(engine):
    """Options() streams from 32768 tokens (the reference node's min_tokens): a 200-token
    call asked to stream runs the stock block, with stock's arena peak."""
    eng = engine("int8")
    inputs = block_inputs(eng.config, 200, seed=11)
    assert h3stream.Options().min_tokens == 32768
    stock, stock_peaks = phase_peaks(eng, 0, inputs, "stock")
    for options in (None, h3stream.Options()):
        out, peaks = phase_peaks(eng, 0, inputs, "streamed", options, expect="stock")
        assert torch.equal(bits(out), bits(stock))
        assert peaks == stock_peaks
    # The same call with small chunks and min_tokens 0 streams, in less memory.
    out, peaks = phase_peaks(eng, 0, inputs, "streamed",
                             streamed_options(q_chunk=50, kv_chunk=50, mlp_chunk=50))
    assert torch.equal(bits(out), bits(stock))
    assert max(peaks.values()) < max(stock_peaks.values())


@pytest.mark.parametrize("phases", ["all", "attn"])
def test_min_tokens_threshold_picks_the_path(engine, phases):
    """As in the forward: a block runs streamed when S >= min_tokens, stock below. The
    reported path is the one that ran: its arena peaks are stock's below the threshold
    and lower than stock's at it; the bits are stock's on both sides."""
    eng = engine("bf16")
    min_tokens = 97
    opts = streamed_options(q_chunk=7, kv_chunk=11, mlp_chunk=13, min_tokens=min_tokens)
    for seq, path in ((min_tokens - 1, "stock"), (min_tokens, "streamed")):
        inputs = block_inputs(eng.config, seq, seed=seq)
        stock, stock_peaks = phase_peaks(eng, 0, inputs, "stock", phases=phases)
        out, peaks = phase_peaks(eng, 0, inputs, "streamed", opts, phases, expect=path)
        assert torch.equal(bits(out), bits(stock)), seq
        assert sorted(peaks) == sorted(stock_peaks)
        assert ("mlp" in peaks) == (phases == "all")
        if path == "stock":
            assert peaks == stock_peaks, seq
        else:
            assert all(peaks[p] < stock_peaks[p] for p in ("kv", "attn")), (peaks, stock_peaks)
        # mode="stock" is stock at any length.
        run(eng, 0, inputs, "stock", opts, phases)


def test_self_check_runs_on_both_sides_of_min_tokens(engine):
    """options.self_check compares stock with streamed on copies whichever path then runs
    (the forward checks block 0 below min_tokens too); phases="attn" checks the full block
    and then runs the attention half."""
    eng = engine("w4a8")
    min_tokens = 67
    opts = streamed_options(q_chunk=5, kv_chunk=11, mlp_chunk=13, min_tokens=min_tokens,
                            self_check=True)
    for seq, path in ((min_tokens - 1, "stock"), (min_tokens, "streamed")):
        inputs = block_inputs(eng.config, seq, seed=4)
        for phases in ("all", "attn"):
            out = run(eng, 0, inputs, "streamed", opts, phases, expect=path)
            assert eng.last_self_check.startswith(f"self_check block 0 ({seq} tokens)")
            assert "bit-equal" in eng.last_self_check
            assert torch.equal(bits(out), bits(run(eng, 0, inputs, "stock", phases=phases)))
        r = eng.self_check(0, *inputs, options=opts)  # min_tokens does not apply to the check
        assert r["all_equal"] is True and len(r["variants"]) == 5


def test_blocks_differ_and_runs_are_deterministic(engine):
    eng = engine("bf16")
    inputs = block_inputs(eng.config, 67, seed=5)
    opts = streamed_options(q_chunk=16, kv_chunk=16, mlp_chunk=16)
    a0 = run(eng, 0, inputs, "streamed", opts)
    a1 = run(eng, 1, inputs, "streamed", opts)
    assert not torch.equal(bits(a0), bits(a1)), "block 0 and block 1 gave the same output"
    assert torch.equal(bits(run(eng, 0, inputs, "streamed", opts)), bits(a0))


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
    if fmt in ("w4a8", "nvfp4"):  # the float8 scales travel as torch.float8_e4m3fn
        assert any(t.dtype == torch.float8_e4m3fn for t in tensors.values())
    if fmt == "nvfp4":  # packed E2M1 codes (uint8) and a scalar fp32 global scale
        assert tensors["blocks.1.mlp.fc1.weight"].dtype == torch.uint8
        assert tensors["blocks.1.mlp.fc1.weight_scale_2"].dim() == 0
    # ComfyUI's state-dict prefix is accepted.
    tensors = {"model.diffusion_model." + k: v for k, v in tensors.items()}
    from_tensors = h3stream.Engine.from_tensors(tensors, threads=2)
    from_file = engine(fmt)
    assert from_tensors.config == from_file.config
    assert from_file.config["format"] == fmt
    inputs = block_inputs(from_file.config, 67, seed=21)
    opts = streamed_options(q_chunk=7, kv_chunk=9, mlp_chunk=10)
    a = assert_really_chunks(from_file, 1, inputs, opts)
    b = run(from_tensors, 1, inputs, "streamed", opts)
    assert torch.equal(bits(a), bits(b))
    assert torch.equal(bits(run(from_tensors, 1, inputs, "stock")), bits(a))


def test_from_tensors_borrows_the_tensors(checkpoint, engine):
    """No copy of the model: the engine computes from the caller's own tensors (a change
    to them in place shows in the next call) and keeps them referenced (dropping the
    caller's dict changes nothing)."""
    from safetensors.torch import load_file

    tensors = load_file(str(checkpoint("int8")))
    eng = h3stream.Engine.from_tensors(tensors)
    inputs = block_inputs(eng.config, 40, seed=2)
    opts = streamed_options(q_chunk=9, kv_chunk=9, mlp_chunk=9)
    want = run(engine("int8"), 0, inputs, "streamed", opts)
    fc2 = tensors["blocks.0.mlp.fc2.weight"]
    del tensors
    assert torch.equal(bits(run(eng, 0, inputs, "streamed", opts)), bits(want))
    fc2.zero_()  # the engine reads this very memory
    assert not torch.equal(bits(run(eng, 0, inputs, "streamed", opts)), bits(want))


def test_self_check(engine):
    eng = engine("w4a8")
    x, t_emb, runs, rope = block_inputs(eng.config, 67, seed=4)
    opts = streamed_options(q_chunk=5, kv_chunk=11, mlp_chunk=13)
    x0 = x.clone()
    r = eng.self_check(0, x, t_emb, runs, rope, options=opts)
    assert torch.equal(bits(x), bits(x0)), "self_check modified x"
    assert r["all_equal"] is True
    assert [v["name"] for v in r["variants"]] == ["full", "q_only", "kv_only", "mlp_only", "none"]
    assert all(v["max_ulp"] == 0 and v["differing"] == 0 for v in r["variants"])
    opts.self_check = True
    assert eng.run_block(0, x, t_emb, runs, rope, options=opts) == "streamed"
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
    run(eng, 1, inputs, "streamed", streamed_options(q_chunk=64, kv_chunk=64, mlp_chunk=64))
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
    inputs = block_inputs(eng.config, 67, seed=13)
    x = inputs[0]
    stock = run(eng, 0, inputs, "stock", phases="attn")
    opts = streamed_options(q_chunk=3, kv_chunk=11)
    eng.reset_ledger()
    streamed = run(eng, 0, inputs, "streamed", opts, phases="attn")
    assert [e["phase"] for e in eng.ledger() if e["block"] == 0] == ["setup", "kv", "attn"]
    assert torch.equal(bits(assert_really_chunks(eng, 0, inputs, opts, "attn")), bits(streamed))
    full = run(eng, 0, inputs, "stock")
    assert torch.equal(bits(streamed), bits(stock))
    assert not torch.equal(bits(stock), bits(x)) and not torch.equal(bits(stock), bits(full))
