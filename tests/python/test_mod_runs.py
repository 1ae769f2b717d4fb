"""ComfyUI's mod_segments with per-token mod rows (a partial denoise mask: one mod-row
index per token of a span) become runs of equal rows, and the block computes the same
bits as with those runs written out."""

import numpy as np
import pytest
import torch

import h3stream
from conftest import bits, block_inputs, run_block, streamed_options


def test_int_rows_pass_through():
    assert h3stream.mod_runs([(0, 5, 1), (5, 9, np.int64(4)), (9, 12, torch.tensor(2))]) == [
        (0, 5, 1), (5, 9, 4), (9, 12, 2)]


@pytest.mark.parametrize("kind", ["torch", "numpy", "list"])
def test_per_token_rows_split_into_runs_of_equal_rows(kind):
    rows = [3, 3, 0, 0, 0, 3, 5, 5]
    row = {"torch": torch.tensor(rows, dtype=torch.int64), "numpy": np.array(rows, np.int32),
           "list": rows}[kind]
    got = h3stream.mod_runs([(0, 4, 1), (4, 12, row), (12, 14, 2)])
    assert got == [(0, 4, 1), (4, 6, 3), (6, 9, 0), (9, 10, 3), (10, 12, 5), (12, 14, 2)]
    one = {"torch": torch.tensor([7]), "numpy": np.array([7]), "list": [7]}[kind]
    assert h3stream.mod_runs([(0, 1, one)]) == [(0, 1, 7)]


def test_rows_h3stream_cannot_take_name_the_segment():
    with pytest.raises(TypeError, match=r"mod_segments\[1\]: the row is a tuple but not of "
                                        r"integer mod-row indices"):
        h3stream.mod_runs([(0, 3, 0), (3, 6, (1, 4, torch.ones(3)))])  # a blend of rows
    with pytest.raises(TypeError, match=r"mod_segments\[0\]: the row is a Tensor \(dtype "
                                        r"torch.float32\)"):
        h3stream.mod_runs([(0, 3, torch.ones(3))])
    with pytest.raises(TypeError, match=r"mod_segments\[0\]: per-token mod rows must be 1-D"):
        h3stream.mod_runs([(0, 4, torch.zeros(2, 2, dtype=torch.int64))])
    with pytest.raises(ValueError, match=r"mod_segments\[0\]: 2 per-token mod rows for a span "
                                         r"of 3 tokens"):
        h3stream.mod_runs([(0, 3, [1, 1])])
    with pytest.raises(TypeError, match=r"mod_segments\[0\]: expected a \(begin, end, mod_row\)"):
        h3stream.mod_runs([(0, 3)])


def test_a_block_with_per_token_rows_equals_the_same_runs(engine):
    eng = engine("int8")
    x, t_emb, _, rope = block_inputs(eng.config, 97, seed=5, timesteps=2)
    # text on row 1, then video whose tokens alternate in patches between rows 0 and 3
    # (masked and generated rows at two timesteps), as ComfyUI's rows_to_mod_index gives.
    per_token = torch.tensor([0 if (i // 7) % 2 else 3 for i in range(80)], dtype=torch.int64)
    segments = [(0, 17, 1), (17, 97, per_token)]
    runs = [(0, 17, 1)] + [(17 + a, 17 + min(a + 7, 80), 0 if (a // 7) % 2 else 3)
                           for a in range(0, 80, 7)]
    assert h3stream.mod_runs(segments) == runs
    opts = streamed_options(q_chunk=13, kv_chunk=29, mlp_chunk=31)
    for mode, options in (("stock", None), ("streamed", opts)):
        want = run_block(eng, 0, (x, t_emb, runs, rope), mode, options)
        got = run_block(eng, 0, (x, t_emb, segments, rope), mode, options)
        assert torch.equal(bits(got), bits(want)), mode
    # Each token kept its own row: moving one token's row changes the block's output.
    moved = per_token.clone()
    moved[0] = 0
    other = run_block(eng, 0, (x, t_emb, [(0, 17, 1), (17, 97, moved)], rope), "stock")
    assert not torch.equal(bits(other), bits(run_block(eng, 0, (x, t_emb, runs, rope), "stock")))
