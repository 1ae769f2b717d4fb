"""The CUDA engine through the Python module, for every weight format (run on the GPU
machine by scripts/device-check.sh under H3S_REQUIRE_GPU=1, where these cannot skip):
streamed == stock on the GPU bit for bit with chunks below the sequence (1-row tails,
primes, kv_block), the same bits on a repeated call, and the GPU block within measured
bounds of the CPU reference over the whole tensor, per row and at its largest error."""

import os
import subprocess
import sys

import pytest
import torch

import h3stream
from conftest import FORMATS, bits, block_inputs, needs_cuda, streamed_options

# GPU vs CPU on the block update (out - x): reduction orders differ, and the int8/W4A8
# quantisers can move a level on a 1-ulp input difference. Bounds from tests/gpu
# (test_block_gpu.cpp, measured on the H200 2026-12-01 at 2x): (rel-rms, worst row,
# largest error / RMS).
BOUNDS = {"int8": (4e-2, 0.1, 0.87), "w4a8": (4e-2, 0.1, 0.87),
          "bf16": (1.5e-2, 0.073, 0.58), "nvfp4": (1.5e-2, 0.073, 0.58)}


def deviation(got, want):
    """(rel-rms, worst row rel-rms, max |d| / rms) of got vs want, [rows, cols] float."""
    d = got - want
    rel = (d.pow(2).sum() / want.pow(2).sum()).sqrt().item()
    row_ref = want.pow(2).sum(1)
    row_ref = torch.where(row_ref > 0, row_ref, want.pow(2).sum() / want.shape[0])
    row = (d.pow(2).sum(1) / row_ref).sqrt().max().item()
    rms = want.pow(2).mean().sqrt()
    return rel, row, (d.abs().max() / rms).item()


@needs_cuda
@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_engine_streamed_equals_stock_and_stays_near_the_cpu(fmt, engine, checkpoint):
    cpu = engine(fmt)
    gpu = h3stream.Engine.from_checkpoint(checkpoint(fmt), backend="cuda")
    inputs = block_inputs(cpu.config, 301, seed=21)
    x, t_emb, runs, rope = inputs
    xg, tg, rg = x.cuda(), t_emb.cuda(), rope.cuda()
    stock = xg.clone()
    assert gpu.run_block(1, stock, tg, runs, rg, mode="stock") == "stock"
    for opts in (streamed_options(q_chunk=1, kv_chunk=1, mlp_chunk=1),
                 streamed_options(q_chunk=13, kv_chunk=37, mlp_chunk=101, kv_block=128),
                 streamed_options(q_chunk=300, kv_chunk=64, mlp_chunk=259, kv_block=256)):
        for _ in range(2):  # the same bits on a repeated call
            got = xg.clone()
            assert gpu.run_block(1, got, tg, runs, rg, options=opts) == "streamed"
            torch.cuda.synchronize()
            assert torch.equal(bits(got.cpu()), bits(stock.cpu())), f"{fmt} {opts}"
    assert not torch.equal(bits(stock.cpu()), bits(x)), "the block did not change x"
    ref = x.clone()
    cpu.run_block(1, ref, t_emb, runs, rope, mode="stock")
    rel, row, mx = deviation(stock.cpu().float() - x.float(), ref.float() - x.float())
    print(f"[ deviation ] python block update {fmt} | 301 tokens | rel-rms {rel:.3g}, "
          f"worst row {row:.3g}, max |d| / rms {mx:.3g}")
    b = BOUNDS[fmt]
    assert rel < b[0] and row < b[1] and mx < b[2], (fmt, (rel, row, mx), b)


@needs_cuda
def test_cuda_kvi8r_streamed_equals_its_stock(engine, checkpoint):
    """kv_store='kvi8r' on the GPU through the Python module (Hopper: its kernel; another
    GPU logs one line and keeps the exact store): streamed == the tier's stock bit for bit."""
    gpu = h3stream.Engine.from_checkpoint(checkpoint("int8"), backend="cuda")
    x, t_emb, runs, rope = block_inputs(engine("int8").config, 301, seed=23)
    xg, tg, rg = x.cuda(), t_emb.cuda(), rope.cuda()
    stock = xg.clone()
    gpu.run_block(0, stock, tg, runs, rg, mode="stock", options=h3stream.Options(kv_store="kvi8r"))
    got = xg.clone()
    opts = streamed_options(kv_store="kvi8r", q_chunk=13, kv_chunk=37, mlp_chunk=101, kv_block=128)
    assert gpu.run_block(0, got, tg, runs, rg, options=opts) == "streamed"
    torch.cuda.synchronize()
    assert torch.equal(bits(got.cpu()), bits(stock.cpu()))


def test_a_skip_fails_when_a_gpu_is_required(tmp_path):
    """The require_gpu plugin on a throwaway suite with one skipping test: it passes
    (skipped) normally and fails under H3S_REQUIRE_GPU=1."""
    (tmp_path / "test_skip.py").write_text(
        "import pytest\n\n@pytest.mark.skipif(True, reason='no GPU here')\n"
        "def test_gpu():\n    pass\n")
    here = os.path.dirname(os.path.abspath(__file__))
    for required, rc, says in (("0", 0, "1 skipped"), ("1", 1, "skipped under H3S_REQUIRE_GPU=1")):
        env = dict(os.environ, H3S_REQUIRE_GPU=required,
                   PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "require_gpu",
                            "-p", "no:cacheprovider", str(tmp_path)],
                           env=env, capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == rc and says in r.stdout, (required, r.returncode, r.stdout)
