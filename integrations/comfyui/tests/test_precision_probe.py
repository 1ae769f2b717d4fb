"""H3 Precision Probe against the fakes: a tiny MiniMax-H3 model built from
fake_comfy_h3 (ComfyUI's module names and DiTBlock.forward, attention without rope) runs
real forwards, so the hooks see real projection inputs. Covers: attachment and records
(every probed block x projection x segment), the statistics on constructed inputs, the
simulated formats (ordering on gaussian data, what the rotations do, bit-equality with
comfy-kitchen's eager quantisers: skipped where comfy-kitchen is not installed, failed under
H3S_REQUIRE_MODULE=1), hook removal, the HTML page, and
composition with H3 Streamed Blocks and the Memory Probe."""

import html.parser
import itertools
import json
import sys

import pytest

from conftest import load_pack, need

torch = need("torch")

from test_nodes_fake import FakePatcher, _install_fake_patcher_extension, make_fake_h3  # noqa: E402

H, HD, FFN, TD = 256, 128, 512, 16     # hidden, head dim (2 heads), ffn, t_emb width
S = 128
# [text 0:24 (rows 10:14 are vision pads the model modulates as video) | audio 24:64 at the
# second timestep | video 64:128]; mod row = t_index * 3 + modality (0 video, 1 text, 2 audio)
SEGS = [(0, 10, 1), (10, 14, 0), (14, 24, 1), (24, 64, 5), (64, 128, 0)]
ROWS = {"text": 20, "audio": 40, "video": 68}
MOD_ROWS = {"text": [1], "audio": [5], "video": [0]}
PROJ = ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2")
CHANNELS = {"attn.qkv_proj": H, "attn.out_proj": H, "mlp.fc1": H, "mlp.fc2": FFN}


@pytest.fixture(autouse=True)
def one_thread():
    """The tensors here are tiny: on a loaded machine torch's spinning intra-op threads make
    them many times slower than one thread does. Restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def pack(monkeypatch):
    _install_fake_patcher_extension()
    import fake_comfy_h3

    fake_comfy_h3.install(monkeypatch)
    mod = load_pack()
    np_ = sys.modules["h3s_comfyui_pack.nodes_precision"]
    np_._said.clear()
    sys.modules["h3s_comfyui_pack.nodes_streamed"]._said.clear()
    sys.modules["h3s_comfyui_pack.nodes_streamed"].drop_engines()
    return mod


def nodes(pack):
    return sys.modules["h3s_comfyui_pack.nodes_precision"]


def hp(pack):
    import importlib

    return importlib.import_module("h3s_comfyui_pack.h3_precision")


def _sd(blocks, seed=0):
    g = torch.Generator().manual_seed(seed)

    def r(*shape, std=1.0):
        return torch.randn(*shape, generator=g) * std

    sd = {}
    for i in range(blocks):
        p = f"blocks.{i}."
        sd[p + "norm1.weight"] = 1 + 0.1 * r(H)
        sd[p + "norm2.weight"] = 1 + 0.1 * r(H)
        sd[p + "attn.qkv_proj.weight"] = r(3 * H, H, std=H ** -0.5)
        sd[p + "attn.out_proj.weight"] = r(H, H, std=H ** -0.5)
        sd[p + "attn.q_norm.weight"] = 1 + 0.1 * r(HD)
        sd[p + "attn.k_norm.weight"] = 1 + 0.1 * r(HD)
        sd[p + "adaln_proj.linear.weight"] = r(18 * H, TD, std=0.05)
        sd[p + "adaln_proj.linear.bias"] = r(18 * H, std=0.05)
        sd[p + "mlp.fc1.weight"] = r(2 * FFN, H, std=H ** -0.5)
        sd[p + "mlp.fc2.weight"] = r(H, FFN, std=FFN ** -0.5)
    return sd


class _Base:
    def __init__(self, dm):
        self.diffusion_model = dm
        self.current_weight_patches_uuid = "w1"


def make_model(blocks=3):
    import fake_comfy_h3

    dm = fake_comfy_h3.DiffusionModel(_sd(blocks), blocks, H, 1e-6)
    return FakePatcher(_Base(dm))


def inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(S, H, generator=g).to(torch.bfloat16)
    x[:, 17] *= 30  # an outlier channel in the residual stream
    t_emb = torch.randn(2, TD, generator=g).to(torch.bfloat16)
    rope = torch.randn(1, S, 1, 48, 2, 2, generator=g).to(torch.bfloat16)
    return x, t_emb, rope


def forward(patcher, x, t_emb, rope, timestep=None):
    """MiniMaxH3Model.forward's part that matters: its DIFFUSION_MODEL wrappers chained
    as ComfyUI's WrapperExecutor does, then _forward's block loop (replacements get
    ComfyUI's block_wrap as original_block)."""
    dm = patcher.model.diffusion_model
    to = patcher.model_options["transformer_options"]
    timestep = torch.tensor([700.0]) if timestep is None else timestep

    def body(xx, ts, ctx, tro, **kw):
        h = xx.clone()
        for i, block in enumerate(dm.blocks):
            rep = to.get("patches_replace", {}).get("dit", {}).get(("double_block", i))
            if rep is None:
                h = block(h, t_emb, SEGS, rope, transformer_options=to)
                continue

            def block_wrap(args, block=block):
                return {"img": block(args["img"], args["t_emb"], args["mod_segments"],
                                     args["rope_freqs"], transformer_options=args["transformer_options"])}
            h = rep({"img": h, "t_emb": t_emb, "mod_segments": SEGS, "rope_freqs": rope,
                     "transformer_options": to}, {"original_block": block_wrap})["img"]
        return h

    calls = [fn for fns in to.get("wrappers", {}).get("diffusion_model", {}).values() for fn in fns]

    def run(i, *a, **k):
        if i == len(calls):
            return body(*a, **k)
        return calls[i](lambda *aa, **kk: run(i + 1, *aa, **kk), *a, **k)

    with torch.no_grad():
        return run(0, x, timestep, None, to, minimax_payload=None)


def read_jsonl(path):
    return [json.loads(l) for l in open(path)]


# -- block selection ------------------------------------------------------------------------
def test_block_selection(pack):
    npm = nodes(pack)
    assert npm.parse_blocks("", 50) == [0, 8, 16, 24, 32, 40, 48, 49]
    assert npm.parse_blocks("", 49) == [0, 8, 16, 24, 32, 40, 48]
    assert npm.parse_blocks("all", 3) == [0, 1, 2]
    assert npm.parse_blocks("0,1,-1", 50) == [0, 1, 49]
    assert npm.parse_blocks(" 2, 2 ,", 5) == [2]
    for bad in ("x", "50", "-51", ",", "1-3"):
        with pytest.raises(ValueError, match="blocks"):
            npm.parse_blocks(bad, 50)


def test_registered_with_its_inputs(pack):
    assert pack.NODE_CLASS_MAPPINGS["H3PrecisionProbe"] is nodes(pack).H3PrecisionProbe
    assert pack.NODE_DISPLAY_NAME_MAPPINGS["H3PrecisionProbe"] == "H3 Precision Probe"
    node = nodes(pack).H3PrecisionProbe
    assert list(node.INPUT_TYPES()["required"]) == ["model", "blocks", "max_rows", "forwards",
                                                    "filename_prefix"]
    assert node.RETURN_TYPES == ("MODEL",)
    with pytest.raises(ValueError, match="MiniMax-H3"):
        p = make_model(1)
        del p.model.diffusion_model.blocks[0].mlp.fc2
        nodes(pack).attach_precision_probe(p, "/nonexistent", "x")


def test_a_projection_run_on_row_chunks_is_skipped_not_fatal(pack, tmp_path, caplog):
    """A replacement that calls a projection on row chunks (upstream's sparse attention
    node): those inputs are not the block's rows, so the probe logs once and goes on."""
    import logging

    p = make_model(1)
    dm = p.model.diffusion_model

    def chunking(args, extra):
        dm.blocks[0].attn.qkv_proj(args["img"][:8])
        return extra["original_block"](args)
    p.set_model_patch_replace(chunking, "dit", "double_block", 0)
    m, rec = nodes(pack).attach_precision_probe(p, str(tmp_path), "pp", blocks="0")
    x, t_emb, rope = inputs()
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        forward(m, x, t_emb, rope)
    assert any("ran on 8 of" in r.getMessage() for r in caplog.records)
    recs = read_jsonl(tmp_path / "pp.jsonl")
    assert {r["projection"] for r in recs} == set(PROJ)  # the block's own calls measured
    assert all(r["rows"] == ROWS[r["segment"]] for r in recs)


def test_prefix_outside_the_output_folder_is_refused(pack, tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules["h3s_comfyui_pack.nodes_memory"], "_output_dir",
                        lambda: str(tmp_path / "output"))
    for bad in ("../escape", str(tmp_path / "abs"), "", "h3stream/../.."):
        with pytest.raises(ValueError, match="is not a file name under ComfyUI's output"):
            nodes(pack).H3PrecisionProbe().probe(make_model(1), filename_prefix=bad)
    assert not list(tmp_path.glob("**/*.jsonl"))


def test_a_second_sampling_run_writes_its_own_files(pack, tmp_path):
    """ComfyUI reuses the node's model when a workflow is queued again: the second run's
    forwards count from 1 (forwards=N probes its first N too) in new files."""
    import comfy.patcher_extension as pe

    m, rec = nodes(pack).attach_precision_probe(make_model(2), str(tmp_path), "pp", blocks="0",
                                                forwards=1)
    [outer] = m.model_options["transformer_options"]["wrappers"][pe.WrappersMP.OUTER_SAMPLE][
        nodes(pack).WRAPPER_KEY]
    x, t_emb, rope = inputs()
    for _ in range(2):
        outer(lambda: [forward(m, x, t_emb, rope) for _ in range(2)])
    first, second = read_jsonl(tmp_path / "pp.jsonl"), read_jsonl(tmp_path / "pp-run2.jsonl")
    assert {r["forward"] for r in first} == {1} and {r["forward"] for r in second} == {1}
    assert len(first) == len(second) > 0
    assert (tmp_path / "pp-run2.html").exists()


# -- records ---------------------------------------------------------------------------------
def test_forward_writes_every_block_projection_and_segment(pack, tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules["h3s_comfyui_pack.nodes_memory"], "_output_dir",
                        lambda: str(tmp_path))
    p = make_model(3)
    (m,) = nodes(pack).H3PrecisionProbe().probe(p, blocks="", max_rows=4096,
                                                filename_prefix="pp")
    assert m is not p and "patches_replace" not in p.model_options["transformer_options"]
    rep = m.model_options["transformer_options"]["patches_replace"]["dit"]
    assert sorted(k[1] for k in rep) == [0, 2]  # every 8th block and the last
    x, t_emb, rope = inputs()
    forward(m, x, t_emb, rope, timestep=torch.tensor([700.0]))
    forward(m, x, t_emb, rope, timestep=torch.tensor([350.0]))
    [path] = list(tmp_path.glob("pp_*.jsonl"))
    recs = read_jsonl(path)
    keys = [(r["forward"], r["block"], r["projection"], r["segment"]) for r in recs]
    want = list(itertools.product((1, 2), (0, 2), PROJ, ("text", "audio", "video")))
    assert sorted(keys) == sorted(want) and len(keys) == len(set(keys))
    for r in recs:
        assert r["rows"] == ROWS[r["segment"]] == r["sampled_rows"]
        assert r["mod_rows"] == MOD_ROWS[r["segment"]]
        assert r["channels"] == CHANNELS[r["projection"]]
        assert r["timestep"] == (700.0 if r["forward"] == 1 else 350.0)
        assert r["absmax"] > 0 and 0 < r["rms"] <= r["absmax"]
        assert len(r["outliers"]) == 8
        for f in ("int8", "int8_convrot", "fp8_e4m3", "nvfp4", "nvfp4_h16"):
            assert 0 < r[f"rel_err_{f}"] < 1, (f, r)
    assert list(tmp_path.glob("pp_*.html"))


def test_max_rows_samples_evenly_and_forwards_limits(pack, tmp_path):
    npm, h = nodes(pack), hp(pack)
    assert h.sample_rows([(0, 10), (20, 30)], 5).tolist() == [0, 4, 8, 22, 26]
    assert h.sample_rows([(3, 7)], 100).tolist() == [3, 4, 5, 6]
    m, rec = npm.attach_precision_probe(make_model(2), str(tmp_path), "pp", blocks="1",
                                        max_rows=16, forwards=1)
    x, t_emb, rope = inputs()
    forward(m, x, t_emb, rope)
    forward(m, x, t_emb, rope)
    recs = read_jsonl(tmp_path / "pp.jsonl")
    assert {r["forward"] for r in recs} == {1} and {r["block"] for r in recs} == {1}
    assert len(recs) == 4 * 3
    assert all(r["sampled_rows"] == 16 and r["rows"] == ROWS[r["segment"]] for r in recs)
    assert rec.forward == 2


def test_recorded_statistics_are_those_of_what_the_projections_receive(pack, tmp_path):
    """Abs-max and RMS per segment equal torch's on the tensors the modules really get
    (fc2's included, though the probe derives it from fc1's output)."""
    p = make_model(1)
    blk = p.model.diffusion_model.blocks[0]
    seen = {}
    mods = {"attn.qkv_proj": blk.attn.qkv_proj, "attn.out_proj": blk.attn.out_proj,
            "mlp.fc1": blk.mlp.fc1, "mlp.fc2": blk.mlp.fc2}
    handles = [mod.register_forward_pre_hook(
        lambda mod, a, name=name: seen.__setitem__(name, a[0].clone())) for name, mod in mods.items()]
    m, _ = nodes(pack).attach_precision_probe(p, str(tmp_path), "pp", blocks="all")
    forward(m, *inputs())
    for h in handles:
        h.remove()
    recs = read_jsonl(tmp_path / "pp.jsonl")
    assert len(recs) == 12
    rows = {"text": list(range(0, 10)) + list(range(14, 24)), "audio": list(range(24, 64)),
            "video": list(range(10, 14)) + list(range(64, 128))}
    for r in recs:
        x = seen[r["projection"]][rows[r["segment"]]].float()
        assert r["absmax"] == pytest.approx(x.abs().max().item(), rel=1e-6)
        assert r["rms"] == pytest.approx(x.pow(2).mean().sqrt().item(), rel=1e-5)
        chan = x.abs().amax(0)
        assert r["median_channel_absmax"] == pytest.approx(chan.median().item(), rel=1e-6)
        assert r["outliers"][0]["channel"] == int(chan.argmax())
    # the residual stream's outlier channel 17 shows in the attention's input
    assert all(r["outliers"][0]["channel"] == 17 for r in recs
               if r["projection"] == "attn.qkv_proj")


def test_statistics_on_a_constructed_input(pack, monkeypatch):
    h = hp(pack)
    torch.manual_seed(0)
    x = torch.randn(600, 512)
    x[:, 37] *= 50
    x[:, 300] *= 20
    x[:, 5] *= 8
    x[200:] *= 3
    segs = [(0, 200, 4), (200, 600, 3)]  # text then video (second timestep)
    out = h.measure(x, segs, max_rows=4096)
    assert [s for s, _, _ in out] == ["text", "video"]
    for (seg, info, vec), (a, b) in zip(out, [(0, 200), (200, 600)]):
        r = h.unpack(info, vec.tolist())
        part = x[a:b]
        chan = part.abs().amax(0)
        assert r["rows"] == b - a and r["channels"] == 512
        assert r["absmax"] == part.abs().max().item()
        assert r["rms"] == pytest.approx(part.pow(2).mean().sqrt().item(), rel=1e-6)
        assert [o["channel"] for o in r["outliers"][:3]] == [37, 300, 5]
        assert r["outliers"][0]["absmax"] == chan[37].item()
        assert r["outliers"][0]["ratio"] == pytest.approx((chan[37] / chan.median()).item(),
                                                          rel=1e-6)
        assert r["nvfp4_tensor_absmax"] == x.abs().max().item()  # the whole tensor's
    # row chunks (bounded memory) give the same numbers
    monkeypatch.setattr(h, "CHUNK_ELEMS", 64 * 512)  # 64-row chunks
    small = h.measure(x, segs, max_rows=4096)
    for (_, _, v1), (_, _, v2) in zip(out, small):
        torch.testing.assert_close(v1, v2, rtol=1e-5, atol=0, equal_nan=True)


def test_segments_with_per_token_rows(pack):
    """A partial denoise mask gives the video span one mod row per token (two timesteps,
    one modality): one video run; a row that is no index is refused by name."""
    h = hp(pack)
    rows = torch.tensor([0] * 5 + [3] * 10 + [0] * 5, dtype=torch.int64)
    runs, mod_rows = h.modality_runs([(0, 8, 1), (8, 10, 0), (10, 30, rows)], 30)
    assert runs == {"text": [(0, 8)], "video": [(8, 30)]}
    assert mod_rows == {"text": [1], "video": [0, 3]}
    with pytest.raises(ValueError, match=r"over \[10, 30\) is neither an int"):
        h.modality_runs([(0, 10, 1), (10, 30, (0, 3, torch.ones(20)))], 30)


# -- formats ---------------------------------------------------------------------------------
def _errors(h, x):
    [(_, info, vec)] = h.measure(x, [(0, x.shape[0], 0)], max_rows=1 << 20)
    r = h.unpack(info, vec.tolist())
    return {f: r[f"rel_err_{f}"] for f in h.FORMATS}


def test_format_errors_are_ordered_on_gaussian_data(pack):
    h = hp(pack)
    torch.manual_seed(0)
    e = _errors(h, torch.randn(2048, 1024))
    assert e["int8_convrot"] < e["fp8_e4m3"] < e["nvfp4"], e
    assert e["int8_convrot"] < 0.015 and 0.015 < e["fp8_e4m3"] < 0.04, e
    assert 0.07 < e["nvfp4"] < 0.13, e
    # a rotation of i.i.d. gaussian data is i.i.d. gaussian: the Hadamard changes little
    assert e["nvfp4_h16"] == pytest.approx(e["nvfp4"], rel=0.05)


def test_what_the_rotations_do(pack):
    """ConvRot's Hadamard-256 spreads outlier channels and cuts int8's error; NVFP4's
    16-element blocks already confine an outlier to its block, so Hadamard-16 (which
    spreads it over exactly that block, putting all 16 values into e2m1's coarse top range)
    raises NVFP4's error there, and lowers it where a block's values have similar
    magnitudes."""
    h = hp(pack)
    torch.manual_seed(0)
    x = torch.randn(1024, 1024)
    x[:, [5, 300, 700]] *= 100
    e = _errors(h, x)
    assert e["int8_convrot"] * 3 < e["int8"], e
    assert e["nvfp4_h16"] > e["nvfp4"] * 1.2, e
    flat = torch.sign(torch.randn(1024, 1024)) * (1 + 0.05 * torch.randn(1024, 1024))
    e = _errors(h, flat)
    assert e["nvfp4_h16"] < e["nvfp4"] * 0.8, e


def test_quantiser_details(pack):
    h = hp(pack)
    mids = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -5.0, 5.9, 0.1, -0.0])
    assert h.round_e2m1(mids).tolist() == [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, -4.0, 6.0, 0.0,
                                           -0.0]
    for n in (16, 64, 256):
        hd = h.hadamard(n)
        torch.testing.assert_close(hd @ hd.T, torch.eye(n), rtol=0, atol=1e-6)
        assert torch.equal(hd, hd.T)
    with pytest.raises(ValueError):
        h.hadamard(128)
    x = torch.randn(8, 100)
    assert h.fake_int8_convrot(x) is None  # 100 columns: no 256-groups
    [(_, info, vec)] = h.measure(x, None, max_rows=8)
    r = h.unpack(info, vec.tolist())
    assert info["segment"] == "all" and r["rel_err_int8_convrot"] is None
    assert r["rel_err_nvfp4"] > 0  # columns padded to the 16-element block
    assert h.fake_nvfp4(torch.zeros(4, 32), 0.0).abs().sum() == 0


def test_quantisers_match_comfy_kitchen(pack):
    # need(): fails, never skips, under H3S_REQUIRE_MODULE=1 (scripts/python-test.sh installs
    # comfy-kitchen 0.2.31, the version ComfyUI pins).
    ck = need("comfy_kitchen.backends.eager.quantization")
    from comfy_kitchen.tensor.int8_utils import _build_hadamard

    h = hp(pack)
    torch.manual_seed(0)
    x = torch.randn(256, 512) * torch.exp(torch.randn(512))
    for n in (16, 256):
        assert torch.equal(h.hadamard(n), _build_hadamard(n))
    amax = x.abs().amax()
    pts = h.nvfp4_tensor_scale(amax).float()
    q, scales = ck.quantize_nvfp4(x, pts)
    assert torch.equal(h.fake_nvfp4(x, amax),
                       ck.dequantize_nvfp4(q, pts, scales, output_type=torch.float32))
    had = _build_hadamard(256)
    qi, s = ck.quantize_and_rotate_rowwise(x, had, 256)
    assert torch.equal(h.fake_int8_convrot(x), h.rotate(qi.float() * s, had.T))


# -- attachment hygiene ------------------------------------------------------------------------
def _hooks(dm):
    return [(n, m) for n, m in dm.named_modules() if m._forward_pre_hooks or m._forward_hooks]


def test_hooks_are_removed_and_the_model_runs_unchanged(pack, tmp_path):
    p = make_model(2)
    dm = p.model.diffusion_model
    x, t_emb, rope = inputs()
    ref = forward(p, x, t_emb, rope)
    m, _ = nodes(pack).attach_precision_probe(p, str(tmp_path), "pp", blocks="all")
    during = {}
    blk = dm.blocks[1]
    orig = blk.mlp.forward

    def spy(h):  # hooks are there while a probed block runs
        during["hooks"] = len(blk.attn.qkv_proj._forward_pre_hooks) + len(blk.mlp.fc1._forward_hooks)
        return orig(h)
    blk.mlp.forward = spy
    got = forward(m, x, t_emb, rope)
    del blk.mlp.forward
    assert during["hooks"] == 2
    assert torch.equal(got, ref)  # the probe measures; it changes nothing
    assert _hooks(dm) == []
    assert torch.equal(forward(p, x, t_emb, rope), ref)
    assert len(read_jsonl(tmp_path / "pp.jsonl")) == 2 * 4 * 3

    def boom(h):
        raise RuntimeError("boom")
    blk.mlp.forward = boom
    with pytest.raises(RuntimeError, match="boom"):
        forward(m, x, t_emb, rope)
    del blk.mlp.forward
    assert _hooks(dm) == []
    assert torch.equal(forward(p, x, t_emb, rope), ref)


class _Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.external, self.json = [], [], None
        self._in = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        self.external += [a[k] for k in ("src", "href") if k in a]
        self._in = tag == "script" and a.get("type") == "application/json"

    def handle_data(self, data):
        if self._in:
            self.json, self._in = data, False


def test_html_page(pack, tmp_path):
    npm = nodes(pack)
    m, rec = npm.attach_precision_probe(make_model(2), str(tmp_path), "pp", blocks="0,1")
    forward(m, *inputs())
    page = (tmp_path / "pp.html").read_text()
    parsed = _Page()
    parsed.feed(page)
    assert page.startswith("<!DOCTYPE html>") and parsed.external == []
    assert "table" in parsed.tags and parsed.tags.count("svg") == 1 + 2 * 4 * 3 * 5
    assert json.loads(parsed.json) == read_jsonl(tmp_path / "pp.jsonl") == rec.records
    for name in PROJ + ("<td>0</td>", "<td>1</td>", "block 1 mlp.fc2", "NVFP4 + H16",
                        "int8 ConvRot-256", "<td>audio</td>"):
        assert name in page, name
    assert "No probed forward recorded yet" in npm.render([])


# -- composition ---------------------------------------------------------------------------------
@pytest.mark.parametrize("order", ["precision_streamed_memory", "streamed_memory_precision",
                                   "memory_precision_streamed"])
def test_composes_with_streamed_blocks_and_memory_probe(pack, tmp_path, order):
    """Probed blocks run ComfyUI's own block (hooks need the model's modules); the others
    stream; both probes record, in any order of application."""
    ns = sys.modules["h3s_comfyui_pack.nodes_streamed"]
    nm = sys.modules["h3s_comfyui_pack.nodes_memory"]
    npm = nodes(pack)
    h3 = make_fake_h3()
    m = make_model(2)
    recs = {}
    for step in order.split("_"):
        if step == "precision":
            m, recs["precision"] = npm.attach_precision_probe(m, str(tmp_path), "pp", blocks="0")
        elif step == "memory":
            m, recs["memory"] = nm.attach_probe(m, str(tmp_path), "mem")
        else:
            m = ns.apply_streamed(m, {"min_tokens": 0, "final_layer_chunk": 0,
                                      "trim_forward": False}, h3=h3)
    x, t_emb, rope = inputs()
    forward(m, x, t_emb, rope)
    eng = ns._engines[next(iter(ns._engines))][1]
    assert [c[0] for c in eng.calls] == [1]  # block 1 streamed, block 0 ran ComfyUI's
    prec = read_jsonl(tmp_path / "pp.jsonl")
    assert {(r["block"], r["projection"]) for r in prec} == {(0, p) for p in PROJ}
    recs["memory"].flush(wait=True)
    paths = {r["block"]: r["path"] for r in read_jsonl(tmp_path / "mem.jsonl")
             if r["phase"] == "block"}
    assert paths == {0: "comfy", 1: "h3stream"}
    assert _hooks(m.model.diffusion_model) == []
