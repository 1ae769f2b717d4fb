"""Fixtures of the h3stream Python tests: tiny synthetic checkpoints (written
by h3stream.make_checkpoint, the same files as `h3s make-checkpoint`) and
random block inputs built with torch (CPU)."""

import pytest
import torch

import h3stream

pytest_plugins = ["require_gpu"]  # a skip fails under H3S_REQUIRE_GPU=1 (device-check.sh)


def cuda_available():
    """The CUDA backend is built and torch sees a GPU."""
    return h3stream.has_cuda() and torch.cuda.is_available()


needs_cuda = pytest.mark.skipif(not cuda_available(),
                                reason="needs the CUDA backend and a GPU (fails instead under "
                                       "H3S_REQUIRE_GPU=1)")

# Every weight format a checkpoint holds; NVFP4 layers are dequantised to bf16 at load.
FORMATS = ["bf16", "int8", "w4a8", "nvfp4"]


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


def streamed_options(**controls):
    """Options that really stream at these tests' lengths: min_tokens 0 (the default
    32768 runs every short sequence stock) and merge_tail_below 0 (a 1-row tail stays
    a 1-row chunk instead of joining the chunk before it)."""
    controls.setdefault("min_tokens", 0)
    controls.setdefault("merge_tail_below", 0)
    return h3stream.Options(**controls)


def run_block(eng, index, inputs, mode="streamed", options=None, phases="all", expect=None):
    """Block `index` on a copy of x; asserts the path the engine reports having run
    (`expect`, default: `mode`)."""
    x, t_emb, runs, rope = inputs
    out = x.clone()
    ran = eng.run_block(index, out, t_emb, runs, rope, mode=mode, options=options, phases=phases)
    assert ran == (expect or mode), f"asked for {mode}, expected {expect or mode}, ran {ran}"
    return out


def phase_peaks(eng, index, inputs, mode="streamed", options=None, phases="all", expect=None):
    """(output, {phase: peak arena bytes}) of one block call, from a fresh ledger."""
    eng.reset_ledger()
    out = run_block(eng, index, inputs, mode, options, phases, expect)
    return out, {e["phase"]: e["peak"] for e in eng.ledger() if e["block"] == index}


def assert_really_chunks(eng, index, inputs, options, phases="all"):
    """Runs the block streamed with `options` and checks that every phase whose chunk
    is below the sequence length really ran in smaller chunks: its arena peak is below
    the same call's with one chunk per phase (the peaks differ only by chunk size).
    Returns the output."""
    seq = inputs[0].shape[0]
    out, got = phase_peaks(eng, index, inputs, "streamed", options, phases)
    whole = h3stream.Options(**dict(options.to_dict(), q_chunk=seq, kv_chunk=seq, mlp_chunk=seq))
    ref_out, ref = phase_peaks(eng, index, inputs, "streamed", whole, phases)
    assert torch.equal(bits(out), bits(ref_out))
    chunked = {"kv": options.kv_chunk, "attn": options.q_chunk, "mlp": options.mlp_chunk}
    checked = 0
    for phase, chunk in chunked.items():
        if phase in ref and 0 < chunk < seq:
            assert got[phase] < ref[phase], (
                f"{phase} chunk {chunk} < {seq} rows but the phase peak {got[phase]} is not "
                f"below one chunk's {ref[phase]}: nothing was chunked")
            checked += 1
    assert checked > 0, f"no phase has a chunk below {seq} rows: {options}"
    return out
