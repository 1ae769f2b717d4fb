"""Bad arguments fail with errors that name the argument, expected vs found."""

import pytest
import torch

import h3stream
from conftest import block_inputs


@pytest.fixture()
def call(engine):
    eng = engine("bf16")
    x, t_emb, runs, rope = block_inputs(eng.config, 33, seed=1)
    args = dict(x=x, t_emb=t_emb, mod_runs=runs, rope=rope)

    def run(index=0, **changes):
        a = dict(args, **{k: v for k, v in changes.items() if k in args})
        kw = {k: v for k, v in changes.items() if k not in args}
        eng.run_block(index, a["x"], a["t_emb"], a["mod_runs"], a["rope"], **kw)

    run.args = args
    run.eng = eng
    return run


def test_wrong_dtypes_are_type_errors(call):
    x, t_emb, rope = call.args["x"], call.args["t_emb"], call.args["rope"]
    with pytest.raises(TypeError, match=r"x: dtype float32 is not accepted, expected bf16"):
        call(x=x.float())
    with pytest.raises(TypeError, match=r"t_emb: dtype float32 is not accepted, expected bf16"):
        call(t_emb=t_emb.float())  # the full time form takes bf16(t_emb)
    with pytest.raises(TypeError, match=r"rope: dtype float16 is not accepted, expected bf16"):
        call(rope=rope.half())


def test_wrong_shapes_are_value_errors(call):
    x, t_emb, rope = call.args["x"], call.args["t_emb"], call.args["rope"]
    with pytest.raises(ValueError, match=r"x: shape \[33, 256\] is not the expected \[33, 512\]"):
        call(x=x[:, :256].contiguous())
    with pytest.raises(ValueError, match=r"x: shape \[33, 512, 1\] is not \[tokens, hidden"):
        call(x=x.unsqueeze(-1))
    with pytest.raises(ValueError, match=r"t_emb: shape \[2, 128\] is not the expected \[2, 256\]"):
        call(t_emb=t_emb[:, :128].contiguous())
    with pytest.raises(ValueError, match=r"rope: shape \[32, 48, 2\] is not the expected \[33, 48, 2\]"):
        call(rope=rope[:32].contiguous())


def test_non_contiguous_is_refused(call):
    x = call.args["x"]
    wide = torch.zeros(33, 1024, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"x: must be contiguous"):
        call(x=wide[:, ::2])
    with pytest.raises(ValueError, match=r"rope: must be contiguous"):
        call(rope=call.args["rope"].transpose(0, 1).contiguous().transpose(0, 1))
    assert x.is_contiguous()


def test_mod_runs_are_checked(call):
    with pytest.raises(ValueError, match=r"mod_runs\[1\] = \(12, 33, 0\).*should start at 10"):
        call(mod_runs=[(0, 10, 0), (12, 33, 0)])
    with pytest.raises(ValueError, match=r"mod_runs: cover rows \[0, 20\) but x has 33 rows"):
        call(mod_runs=[(0, 20, 0)])
    with pytest.raises(ValueError, match=r"mod_row must be in 0\.\.5"):
        call(mod_runs=[(0, 33, 6)])
    with pytest.raises(ValueError, match=r"mod_runs: empty"):
        call(mod_runs=[])
    with pytest.raises(TypeError, match=r"mod_runs\[0\]: expected a \(begin, end, mod_row\) triple"):
        call(mod_runs=[(0, 33)])
    with pytest.raises(TypeError, match=r"mod_runs\[0\]: the row is a float .*not an int"):
        call(mod_runs=[(0, 33, 0.5)])
    with pytest.raises(ValueError, match=r"mod_runs\[0\]: 32 per-token mod rows for a span of 33"):
        call(mod_runs=[(0, 33, torch.zeros(32, dtype=torch.int64))])


def test_index_mode_phases_stream(call):
    with pytest.raises(ValueError, match=r"index: block 2 does not exist, the model has blocks 0\.\.1"):
        call(index=2)
    with pytest.raises(ValueError, match=r"mode 'fast' is not valid: use 'streamed' or 'stock'"):
        call(mode="fast")
    with pytest.raises(ValueError, match=r"phases 'mlp' is not valid"):
        call(phases="mlp")
    with pytest.raises(TypeError, match=r"stream: 'abc' is not a CUDA stream"):
        call(stream="abc")


def test_not_an_array(call):
    with pytest.raises(TypeError):
        call(x=[[0.0] * 512] * 33)


def test_nothing_ran_after_an_error(call):
    x = call.args["x"]
    before = x.clone()
    with pytest.raises(ValueError):
        call(mod_runs=[(0, 20, 0)])
    assert torch.equal(x.view(torch.int16), before.view(torch.int16))


def test_backend_and_device_errors(checkpoint):
    if not h3stream.cuda_built():
        with pytest.raises(ValueError, match=r"built without the CUDA backend"):
            h3stream.Engine.from_checkpoint(checkpoint("bf16"), backend="cuda")
    else:
        with pytest.raises(ValueError, match=r"cuda device 99 does not exist"):
            h3stream.Engine.from_checkpoint(checkpoint("bf16"), backend="cuda", device=99)
    with pytest.raises(ValueError, match=r"backend 'tpu' is not valid: use 'cpu' or 'cuda'"):
        h3stream.Engine.from_checkpoint(checkpoint("bf16"), backend="tpu")
    with pytest.raises(ValueError, match=r"threads = -3 is out of range: it must be >= 0"):
        h3stream.Engine.from_checkpoint(checkpoint("bf16"), threads=-3)
    with pytest.raises(ValueError, match=r"memory_budget = -1 is out of range"):
        h3stream.Engine.from_checkpoint(checkpoint("bf16"), memory_budget=-1)
    with pytest.raises(ValueError, match=r"vram_budget = -2 is out of range"):
        h3stream.Engine.from_checkpoint(checkpoint("bf16"), vram_budget=-2)


def test_memory_budget_is_enforced(checkpoint):
    eng = h3stream.Engine.from_checkpoint(checkpoint("bf16"), memory_budget=64 << 10)
    x, t_emb, runs, rope = block_inputs(eng.config, 200, seed=2)
    with pytest.raises(MemoryError, match=r"budget"):
        eng.run_block(0, x, t_emb, runs, rope, mode="stock")


def test_checkpoint_errors(tmp_path):
    with pytest.raises(ValueError, match=r"cannot open"):
        h3stream.Engine.from_checkpoint(tmp_path / "missing.safetensors")


def test_from_tensors_errors(checkpoint):
    from safetensors.torch import load_file

    good = load_file(str(checkpoint("int8")))
    missing = dict(good)
    del missing["blocks.1.mlp.fc2.weight_scale"]
    with pytest.raises(ValueError, match=r"tensors: missing tensor 'blocks\.1\.mlp\.fc2\.weight_scale'"):
        h3stream.Engine.from_tensors(missing)
    bad_dtype = dict(good, **{"blocks.0.attn.qkv_proj.weight": good["blocks.0.attn.qkv_proj.weight"].float()})
    with pytest.raises(ValueError, match=r"tensor 'blocks\.0\.attn\.qkv_proj\.weight' has dtype F32, expected I8"):
        h3stream.Engine.from_tensors(bad_dtype)
    extra = dict(good, **{"blocks.0.attn.extra": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"unexpected tensor 'blocks\.0\.attn\.extra'"):
        h3stream.Engine.from_tensors(extra)
    with pytest.raises(TypeError, match=r"tensors\['blocks\.0\.norm1\.weight'\]: str is not an array"):
        h3stream.Engine.from_tensors(dict(good, **{"blocks.0.norm1.weight": "x"}))
    wrong_shape = dict(good, **{"blocks.0.norm1.weight": torch.zeros(7, dtype=torch.bfloat16)})
    with pytest.raises(ValueError, match=r"'blocks\.0\.norm1\.weight' has shape \[7\], expected \[512\]"):
        h3stream.Engine.from_tensors(wrong_shape)
