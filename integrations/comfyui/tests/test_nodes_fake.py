"""The node logic against fakes of ComfyUI's ModelPatcher / H3 model and of the
h3stream module: which path each block takes, the engine cache, self_check's one
line, mlp_chunk 0, the probe's chaining and ledger files, the chunked final layer.
test_mlp_half_real.py runs the real module with a real MLP half; ComfyUI itself is
exercised by scripts/comfyui_e2e.py."""

import copy
import importlib.util
import json
import logging
import os
import sys
import types

import pytest

from conftest import REPO, load_pack, need

torch = need("torch")
nn = torch.nn

S_HIDDEN = 16


# -- fakes of ComfyUI ---------------------------------------------------------------
def _install_fake_patcher_extension():
    pe = types.ModuleType("comfy.patcher_extension")

    class WrappersMP:
        OUTER_SAMPLE = "outer_sample"
        DIFFUSION_MODEL = "diffusion_model"

    def add_wrapper_with_key(kind, key, fn, opts, is_model_options=False):
        to = opts.setdefault("transformer_options", {}) if is_model_options else opts
        to.setdefault("wrappers", {}).setdefault(kind, {}).setdefault(key, []).append(fn)

    pe.WrappersMP = WrappersMP
    pe.add_wrapper_with_key = add_wrapper_with_key
    comfy = sys.modules.get("comfy") or types.ModuleType("comfy")
    comfy.patcher_extension = pe
    sys.modules["comfy"] = comfy
    sys.modules["comfy.patcher_extension"] = pe


class FakeNorm(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, dtype=torch.bfloat16), requires_grad=False)


class FakeBlock(nn.Module):
    """A DiT block's module tree under ComfyUI's names (tiny shapes: the fake engine only
    records which tensors each call brings)."""

    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = FakeNorm(4), FakeNorm(4)
        self.attn = nn.Module()
        self.attn.qkv_proj, self.attn.out_proj = nn.Linear(4, 12, bias=False), nn.Linear(4, 4,
                                                                                       bias=False)
        self.attn.q_norm, self.attn.k_norm = FakeNorm(4), FakeNorm(4)
        self.mlp = nn.Module()
        self.mlp.fc1, self.mlp.fc2 = nn.Linear(4, 8, bias=False), nn.Linear(4, 4, bias=False)
        self.adaln_proj = nn.Module()
        self.adaln_proj.linear = nn.Linear(8, 72)


class FakeFinal(nn.Module):
    """ComfyUI's FinalLayer, same expressions (bf16 norm/adaLN, fp32 heads)."""

    def __init__(self, hidden=S_HIDDEN):
        super().__init__()
        self.norm = nn.RMSNorm(hidden, eps=1e-5, dtype=torch.bfloat16)
        self.ada = nn.Linear(8, 2 * hidden, dtype=torch.bfloat16)
        self.video_out = nn.Linear(hidden, 12, dtype=torch.float32)
        self.audio_out = nn.Linear(hidden, 5, dtype=torch.float32)

    def adaln_proj(self, t_emb):
        return self.ada(t_emb).chunk(2, dim=-1)

    def forward(self, x, t_emb, video_seg, audio_seg):
        shift, scale = self.adaln_proj(t_emb)
        va, vb, vrow = video_seg
        aa, ab, arow = audio_seg
        hv = (self.norm(x[va:vb]) * (1.0 + scale[vrow]) + shift[vrow]).to(torch.float32)
        ha = (self.norm(x[aa:ab]) * (1.0 + scale[arow]) + shift[arow]).to(torch.float32)
        return self.video_out(hv), self.audio_out(ha)


class FakeDM(nn.Module):
    def __init__(self, blocks=2):
        super().__init__()
        self.blocks = nn.ModuleList(FakeBlock() for _ in range(blocks))
        self.final_layer = FakeFinal()
        self.video_patch_proj = nn.Linear(2, 2)
        self.audio_patch_proj = nn.Linear(2, 2)
        self.rope = nn.Module()


class FakeBase:
    def __init__(self):
        self.diffusion_model = FakeDM()
        self.current_weight_patches_uuid = "w1"


class FakePatcher:
    def __init__(self, model=None, options=None):
        self.model = model or FakeBase()
        self.model_options = options if options is not None else {"transformer_options": {}}
        self.object_patches = {}

    def clone(self):
        def dl(o):
            if isinstance(o, dict):
                return {k: dl(v) for k, v in o.items()}
            if isinstance(o, list):
                return [dl(v) for v in o]
            return o
        n = FakePatcher(self.model, dl(self.model_options))
        n.object_patches = dict(self.object_patches)
        return n

    def set_model_patch_replace(self, patch, name, block_name, number):
        to = self.model_options["transformer_options"]
        to.setdefault("patches_replace", {}).setdefault(name, {})[(block_name, number)] = patch

    def add_object_patch(self, name, obj):
        self.object_patches[name] = obj


def fake_forward(patcher, S=64, recorder=None, segs=None):
    """The block loop of MiniMaxH3Model._forward; ComfyUI's block doubles x in place."""
    to = patcher.model_options["transformer_options"]
    x = torch.full((S, S_HIDDEN), 1.0, dtype=torch.bfloat16)
    rope = torch.randn(1, S, 1, 48, 2, 2).to(torch.bfloat16)
    t_emb = torch.randn(1, 8, dtype=torch.bfloat16)
    segs = segs if segs is not None else [(0, S, 0)]
    wrappers = to.get("wrappers", {}).get("diffusion_model", {})
    calls = []
    for fns in wrappers.values():
        for fn in fns:
            calls.append(fn)

    def body():
        nonlocal x
        for i in range(len(patcher.model.diffusion_model.blocks)):
            rep = to.get("patches_replace", {}).get("dit", {}).get(("double_block", i))

            def original(args):
                return {"img": args["img"].mul_(2)}
            args = {"img": x, "t_emb": t_emb, "mod_segments": segs, "rope_freqs": rope,
                    "transformer_options": to}
            x = rep(args, {"original_block": original})["img"] if rep else original(args)["img"]
        return x

    # Every DIFFUSION_MODEL wrapper, outermost first, as ComfyUI's WrapperExecutor chains them.
    def run(i, xx, *a, **k):
        if i == len(calls):
            return body()
        return calls[i](lambda *aa, **kk: run(i + 1, *aa, **kk), xx, *a, **k)

    return run(0, [x], None, None)


# -- a fake h3stream -------------------------------------------------------------------
def _module_mod_runs():
    """h3stream.mod_runs itself (pure Python, python/h3stream/mod_runs.py)."""
    spec = importlib.util.spec_from_file_location(
        "h3s_mod_runs_under_test", os.path.join(REPO, "python", "h3stream", "mod_runs.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.mod_runs


def make_fake_h3(attn_only=True, diverged=(), tier=None):
    """A fake module; `diverged` names self_check variants that report differing bits,
    `tier` the approximate tier's error its self_check reports."""
    h3 = types.SimpleNamespace()
    h3.built = []

    class Options:
        def __init__(self, **kw):
            self.kw = kw

    class Engine:
        backend = "cpu"
        config = {"format": "bf16"}

        def __init__(self):
            self.calls = []
            self.weights = []  # each call's {key: tensor}
            self.ledger_entries = []

        @classmethod
        def from_tensors(cls, sd, backend="cpu", device=0, lazy_blocks=False):
            assert lazy_blocks, "the node's engine must hold the config only"
            e = cls()
            h3.built.append((backend, device, sorted(sd)[:1]))
            h3.config_shapes = {k: tuple(v.shape) for k, v in sd.items()}
            return e

        def run_block(self, index, x, t_emb, segs, rope, mode="streamed", options=None,
                      phases="all", weights=None, metadata=None):
            if phases == "attn" and not attn_only:
                raise NotImplementedError("attention-only phase missing")
            assert rope.shape == (x.shape[0], 48, 2) and rope.is_contiguous()
            assert options.kw["self_check"] is False
            assert weights is not None, "each call brings its block's weights"
            assert all(type(v) is int for run in segs for v in run), segs  # h3stream's runs
            self.calls.append((index, mode, phases, x.shape[0]))
            self.runs = list(segs)
            self.weights.append(dict(weights))
            x.add_(1)
            self.ledger_entries = [{"block": index, "phase": p, "allocated_at_start": 0,
                                    "allocated": 0, "peak": 1000 + index, "reserved": 0}
                                   for p in ("kv", "attn", "mlp")]

        def self_check(self, index, x, t_emb, segs, rope, options=None, weights=None,
                       metadata=None):
            assert weights is not None
            variants = [{"name": n, "max_ulp": 3 if n in diverged else 0,
                         "mean_ulp": 0.1 if n in diverged else 0.0,
                         "differing": 7 if n in diverged else 0}
                        for n in ("full", "q_only", "kv_only", "mlp_only", "none")]
            out = {"line": "ok", "all_equal": not diverged, "variants": variants}
            if tier is not None:
                out["tier"] = tier
            return out

        def ledger(self):
            return list(self.ledger_entries)

        def reset_ledger(self):
            self.ledger_entries = []

    h3.Options = Options
    h3.Engine = Engine
    h3.has_cuda = lambda: False
    h3.rope_from_comfy = lambda r: r[0, :, 0, :, :, 0].contiguous()
    h3.mod_runs = _module_mod_runs()
    return h3


@pytest.fixture
def pack(monkeypatch):
    _install_fake_patcher_extension()
    import fake_comfy_ops

    fake_comfy_ops.install(monkeypatch)
    mod = load_pack()
    import importlib

    ns = importlib.import_module("h3s_comfyui_pack.nodes_streamed")
    ns._said.clear()
    ns.drop_engines()
    return mod


def streamed(pack):
    return sys.modules["h3s_comfyui_pack.nodes_streamed"]


def memory(pack):
    return sys.modules["h3s_comfyui_pack.nodes_memory"]


def test_short_sequences_run_comfyui_block(pack):
    h3 = make_fake_h3()
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 65}, h3=h3)
    x = fake_forward(m, S=64)
    assert torch.all(x == 4) and h3.built == []


def test_long_sequences_run_h3stream_with_one_engine(pack):
    h3 = make_fake_h3()
    p = FakePatcher()
    m = streamed(pack).apply_streamed(p, {"min_tokens": 0, "final_layer_chunk": 0}, h3=h3)
    assert "diffusion_model.final_layer.forward" not in m.object_patches
    x = fake_forward(m)
    assert torch.all(x == 3) and len(h3.built) == 1
    fake_forward(m)
    assert len(h3.built) == 1  # cached
    p.model.current_weight_patches_uuid = "w2"  # ComfyUI patched the weights (LoRA)
    fake_forward(m)
    assert len(h3.built) == 1  # the engine holds the config only: each call brings weights
    eng = streamed(pack)._engines[next(iter(streamed(pack)._engines))][1]
    assert len(eng.weights) == 6  # 2 blocks x 3 forwards
    assert sorted(eng.weights[0]) == sorted(
        f"blocks.0.{k}" for k in ("norm1.weight", "norm2.weight", "attn.qkv_proj.weight",
                                  "attn.out_proj.weight", "attn.q_norm.weight",
                                  "attn.k_norm.weight", "mlp.fc1.weight", "mlp.fc2.weight",
                                  "adaln_proj.linear.weight", "adaln_proj.linear.bias"))
    assert "model_options" not in p.__dict__.get("x", {})  # the input model is untouched
    assert "patches_replace" not in p.model_options["transformer_options"]


def test_stock_mode_and_previous_patch_is_kept_for_stock_calls(pack):
    h3 = make_fake_h3()
    p = FakePatcher()
    seen = []

    def other(args, extra):
        seen.append(args["img"].shape[0])
        return extra["original_block"](args)
    p.set_model_patch_replace(other, "dit", "double_block", 0)
    m = streamed(pack).apply_streamed(p, {"min_tokens": 100}, h3=h3, mode="stock")
    fake_forward(m, S=64)
    assert seen == [64]  # below min_tokens the earlier replacement runs
    fake_forward(m, S=128)
    eng = streamed(pack)._engines[next(iter(streamed(pack)._engines))][1]
    assert [c[1] for c in eng.calls] == ["stock", "stock"]


def test_self_check_logs_one_line_once(pack, caplog):
    h3 = make_fake_h3()
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0, "self_check": True}, h3=h3)
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        fake_forward(m)
        fake_forward(m)
    lines = [r.getMessage() for r in caplog.records if "self_check" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "streamed vs h3stream stock bit-equal" in lines[0]
    assert "full 0 differ / max 0 mean 0 ulp" in lines[0]
    assert "h3stream vs ComfyUI block:" in lines[0] and "ulp" in lines[0]
    assert "APPROXIMATE" not in lines[0]


def test_self_check_labels_an_approximate_tier_with_its_error(pack, caplog):
    tier = {"kv_store": "kvfp4s", "approximate": True, "rel_rms": 1.49e-3, "max_abs": 0.25}
    h3 = make_fake_h3(tier=tier)
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0, "self_check": True},
                                      h3=h3)
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        fake_forward(m)
    lines = [r.getMessage() for r in caplog.records if "self_check" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "kv_store kvfp4s (APPROXIMATE) vs the exact store: rel-rms 0.00149" in lines[0]


def test_self_check_reports_a_divergence(pack, caplog):
    h3 = make_fake_h3(diverged=("full", "q_only"))
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0, "self_check": True}, h3=h3)
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        fake_forward(m)
    lines = [r.getMessage() for r in caplog.records if "self_check" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "streamed vs h3stream stock DIFFERENT" in lines[0], lines[0]
    assert "full 7 differ / max 3 mean 0.1 ulp" in lines[0] and "q_only 7 differ" in lines[0], lines[0]
    assert "kv_only 0 differ" in lines[0] and "stock bit-equal" not in lines[0], lines[0]


def test_mlp_chunk_zero_without_attention_only_phase_falls_back_once(pack, caplog):
    h3 = make_fake_h3(attn_only=False)
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0, "mlp_chunk": 0}, h3=h3)
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        x = fake_forward(m)
        fake_forward(m)
    assert torch.all(x == 4)
    assert len([r for r in caplog.records if "attention-only" in r.getMessage()]) == 1


def test_mlp_chunk_zero_runs_attention_then_the_models_mlp(pack, monkeypatch):
    h3 = make_fake_h3(attn_only=True)
    ns = streamed(pack)
    monkeypatch.setattr(ns, "comfy_mlp_half", lambda block, x, t, s: x.mul_(10))
    m = ns.apply_streamed(FakePatcher(), {"min_tokens": 0, "mlp_chunk": 0}, h3=h3)
    x = fake_forward(m)
    assert torch.all(x == 210)  # ((1 + 1) * 10 + 1) * 10
    eng = ns._engines[next(iter(ns._engines))][1]
    assert {c[2] for c in eng.calls} == {"attn"}


def test_per_token_mod_rows_reach_h3stream_as_runs(pack):
    """A partial denoise mask: ComfyUI gives the video span one mod row per token (upstream's
    rows_to_mod_index); h3stream gets the same rows as runs, once per forward."""
    h3 = make_fake_h3()
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0}, h3=h3)
    rows = torch.tensor([0] * 10 + [3] * 20 + [0] * 14, dtype=torch.int64)
    x = fake_forward(m, S=64, segs=[(0, 20, 1), (20, 64, rows)])
    assert torch.all(x == 3)  # both blocks ran in h3stream
    eng = streamed(pack)._engines[next(iter(streamed(pack)._engines))][1]
    assert eng.runs == [(0, 20, 1), (20, 30, 0), (30, 50, 3), (50, 64, 0)]


def test_mod_rows_h3stream_cannot_take_run_comfyui_once(pack, caplog):
    h3 = make_fake_h3()
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0}, h3=h3)
    blend = (1, 4, torch.full((44,), 0.5))  # a fork's blend of two rows: not an index
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        x = fake_forward(m, S=64, segs=[(0, 20, 1), (20, 64, blend)])
        fake_forward(m, S=64, segs=[(0, 20, 1), (20, 64, blend)])
    assert torch.all(x == 4)  # ComfyUI's own blocks
    lines = [r.getMessage() for r in caplog.records if "modulation rows" in r.getMessage()]
    assert len(lines) == 1 and "mod_segments[1]" in lines[0], lines


def test_non_bf16_input_runs_comfyui(pack, caplog):
    h3 = make_fake_h3()
    m = streamed(pack).apply_streamed(FakePatcher(), {"min_tokens": 0}, h3=h3)
    rep = m.model_options["transformer_options"]["patches_replace"]["dit"][("double_block", 0)]
    x = torch.ones(8, S_HIDDEN)
    out = rep({"img": x, "t_emb": None, "mod_segments": [], "rope_freqs": None},
              {"original_block": lambda a: {"img": a["img"] * 2}})
    assert torch.all(out["img"] == 2) and h3.built == []


@pytest.mark.parametrize("order", ["probe_first", "streamed_first"])
def test_probe_stays_outermost_and_writes_the_ledger(pack, tmp_path, order):
    h3 = make_fake_h3()
    ns, nm = streamed(pack), memory(pack)
    p = FakePatcher()
    if order == "probe_first":
        pm, rec = nm.attach_probe(p, str(tmp_path), "probe")
        m = ns.apply_streamed(pm, {"min_tokens": 0}, h3=h3)
    else:
        m0 = ns.apply_streamed(p, {"min_tokens": 0}, h3=h3)
        m, rec = nm.attach_probe(m0, str(tmp_path), "probe")
    rep = m.model_options["transformer_options"]["patches_replace"]["dit"]
    for i in range(2):
        assert isinstance(rep[("double_block", i)], nm.ProbeBlock)
        assert isinstance(rep[("double_block", i)].inner, ns.StreamedBlock)
    x = fake_forward(m)
    assert torch.all(x == 3)
    rec.flush(wait=True)
    recs = [json.loads(l) for l in open(tmp_path / "probe.jsonl")]
    phases = [(r["phase"], r.get("block")) for r in recs]
    assert phases[0] == ("embed", None) and phases[-1] == ("forward", None)
    assert ("block", 0) in phases and ("kv", 1) in phases and ("final", None) in phases
    assert {r.get("path") for r in recs if r["phase"] == "block"} == {"h3stream"}
    assert all(r["host_rss"] for r in recs if r["phase"] == "block")
    # docs/FEATURES.md "Companions": per phase allocated, peak, reserved and host RSS.
    for r in (r for r in recs if r["phase"] in ("kv", "attn", "mlp")):
        assert r["arena_peak"] == 1000 + r["block"] and r["arena_reserved"] == 0, r
        assert r["arena_allocated"] == 0 and r["host_rss"], r
    html = (tmp_path / "probe.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "<svg" in html


def test_kvmix_head_controls_are_checked_against_the_model_when_applied(pack):
    p = FakePatcher()
    for b in p.model.diffusion_model.blocks:
        b.attn.heads = 4
    apply = streamed(pack).apply_streamed
    h3 = make_fake_h3()
    with pytest.raises(ValueError, match="kv_mix_count = 5 is more than the model's 4 heads"):
        apply(p, {"kv_store": "kvmix", "kv_mix_count": 5}, h3=h3)
    with pytest.raises(ValueError, match=r"head 4 is not a head of this model \(it has heads 0\.\.3"):
        apply(p, {"kv_store": "kvmix", "kv_mix_heads": "0,4"}, h3=h3)
    apply(p, {"kv_store": "kvmix", "kv_mix_count": 4}, h3=h3)
    apply(p, {"kv_store": "kvfp4s", "kv_mix_count": 5}, h3=h3)  # no effect on other stores


def test_memory_probe_writes_new_files_for_a_second_sampling_run(pack, tmp_path):
    nm = memory(pack)
    m, rec = nm.attach_probe(FakePatcher(), str(tmp_path), "probe")
    [outer] = m.model_options["transformer_options"]["wrappers"]["outer_sample"][nm.WRAPPER_KEY]
    for _ in range(2):
        outer(lambda: [fake_forward(m) for _ in range(2)])
    for stem in ("probe", "probe-run2"):
        recs = [json.loads(l) for l in open(tmp_path / f"{stem}.jsonl")]
        assert {r["forward"] for r in recs} == {1, 2}, stem
        assert (tmp_path / f"{stem}.html").exists()


def test_final_layer_chunks_merge_a_short_tail(pack):
    cfl = streamed(pack).ChunkedFinalLayer(FakeFinal(), 600, "exact")
    assert cfl.row_chunks(1300) == [(0, 600), (600, 1300)]  # the 100-row tail merged
    assert cfl.row_chunks(1800) == [(0, 600), (600, 1200), (1200, 1800)]
    assert cfl.row_chunks(1000) == [(0, 1000)]
    assert cfl.row_chunks(400) == [(0, 400)]
    keep = streamed(pack).ChunkedFinalLayer(FakeFinal(), 600, "exact", 0)
    assert keep.row_chunks(1300) == [(0, 600), (600, 1200), (1200, 1300)]


@pytest.mark.parametrize("chunk", [1, 7, 50])
def test_chunked_final_layer_exact_is_bit_equal_to_stock(pack, chunk):
    torch.manual_seed(0)
    fl = FakeFinal()
    x = torch.randn(100, S_HIDDEN).to(torch.bfloat16)
    t = torch.randn(2, 8, dtype=torch.bfloat16)
    segs = ((30, 100, 1), (10, 30, 0))
    with torch.no_grad():
        ref = fl(x, t, *segs)
        # merge_tail_below 0: every chunk of these short spans stays its own.
        got = streamed(pack).ChunkedFinalLayer(fl, chunk, "exact", 0)(x, t, *segs)
        approx = streamed(pack).ChunkedFinalLayer(fl, chunk, "streamed", 0)(x, t, *segs)
    for r, g, a in zip(ref, got, approx):
        assert torch.equal(r, g)
        torch.testing.assert_close(a, r, rtol=1e-5, atol=1e-5)


def test_streamed_head_gemm_runs_every_call_at_the_chunk_rows(pack):
    """final_layer_gemm=streamed: every head call has `chunk` rows (the last window ends at
    the span's end and overlaps the one before), so cuBLAS, which picks kernels by M, runs
    one kernel for every row; each row is kept from exactly one window."""
    cfl = streamed(pack).ChunkedFinalLayer(FakeFinal(), 600, "streamed")
    assert cfl.gemm_windows(1300) == [(0, 600, 0), (600, 1200, 600), (1200, 1300, 700)]
    assert cfl.gemm_windows(1800) == [(0, 600, 0), (600, 1200, 600), (1200, 1800, 1200)]
    assert cfl.gemm_windows(601) == [(0, 600, 0), (600, 601, 1)]


class RowWiseHead(nn.Module):
    """A head whose every output row depends on its own input row only, with no
    reduction (so its bits cannot depend on how the rows are batched), recording the
    rows of every call."""

    def __init__(self, out):
        super().__init__()
        self.out, self.rows = out, []

    def forward(self, h):
        self.rows.append(h.shape[0])
        return h[:, :self.out] * 3.0 + 1.0


@pytest.mark.parametrize("chunk", [7, 30, 64])
def test_streamed_head_gemm_keeps_each_row_from_its_window(pack, chunk):
    torch.manual_seed(2)
    fl = FakeFinal()
    fl.video_out, fl.audio_out = RowWiseHead(12), RowWiseHead(5)
    x = torch.randn(100, S_HIDDEN).to(torch.bfloat16)
    t = torch.randn(2, 8, dtype=torch.bfloat16)
    segs = ((30, 100, 1), (10, 30, 0))
    with torch.no_grad():
        ref = fl(x, t, *segs)
        fl.video_out.rows.clear(), fl.audio_out.rows.clear()
        got = streamed(pack).ChunkedFinalLayer(fl, chunk, "streamed")(x, t, *segs)
    for r, g in zip(ref, got):
        assert torch.equal(r, g)
    for head, n in ((fl.video_out, 70), (fl.audio_out, 20)):
        assert head.rows == ([chunk] * -(-n // chunk) if n > chunk else [n]), (chunk, head.rows)


class BatchDependentHead(RowWiseHead):
    """A head whose rows change with the call's row count, as cuBLAS's kernel choice can."""

    def forward(self, h):
        return super().forward(h) + 1e-3 * h.shape[0]


def final_layer_self_check_lines(pack, caplog, fl, chunk, gemm, calls=2, self_check=True):
    x = torch.randn(100, S_HIDDEN).to(torch.bfloat16)
    t = torch.randn(2, 8, dtype=torch.bfloat16)
    segs = ((30, 100, 1), (10, 30, 0))
    cfl = streamed(pack).ChunkedFinalLayer(fl, chunk, gemm, self_check=self_check)
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"), torch.no_grad():
        outs = [cfl(x, t, *segs) for _ in range(calls)]
        ref = fl(x, t, *segs)
    lines = [r.getMessage() for r in caplog.records if "self_check final layer" in r.getMessage()]
    return lines, outs, ref


def test_final_layer_self_check_logs_bit_equal_once(pack, caplog):
    fl = FakeFinal()
    fl.video_out, fl.audio_out = RowWiseHead(12), RowWiseHead(5)
    lines, outs, ref = final_layer_self_check_lines(pack, caplog, fl, 30, "streamed")
    assert len(lines) == 1, lines
    assert "final_layer_chunk 30, final_layer_gemm streamed vs the model's own final layer " \
        "bit-equal" in lines[0], lines[0]
    assert "video bit-equal (840 values)" in lines[0] and "audio bit-equal (100 values)" in lines[0]
    for out in outs:  # the check changes nothing it returns
        assert all(torch.equal(o, r) for o, r in zip(out, ref))


def test_final_layer_self_check_reports_rows_that_differ(pack, caplog):
    fl = FakeFinal()
    fl.video_out, fl.audio_out = BatchDependentHead(12), BatchDependentHead(5)
    # chunk 30: video (70 rows) runs as three 30-row windows, audio (20 rows) in one call
    # as stock does, so only the video rows differ.
    lines, outs, ref = final_layer_self_check_lines(pack, caplog, fl, 30, "streamed")
    assert len(lines) == 1 and "DIFFERENT" in lines[0], lines
    assert "video max" in lines[0] and "(70 rows)" in lines[0], lines[0]
    assert "audio bit-equal" in lines[0], lines[0]
    # exact mode runs the head once at full M: the same bits as the layer's own forward.
    caplog.clear()
    lines, _, _ = final_layer_self_check_lines(pack, caplog, fl, 30, "exact")
    assert len(lines) == 1 and "final_layer_gemm exact vs the model's own final layer " \
        "bit-equal" in lines[0], lines


def test_final_layer_self_check_is_off_unless_asked_and_skips_unchunked_calls(pack, caplog):
    fl = FakeFinal()
    lines, _, _ = final_layer_self_check_lines(pack, caplog, fl, 30, "streamed", self_check=False)
    assert lines == []
    lines, _, _ = final_layer_self_check_lines(pack, caplog, fl, 200, "streamed")
    assert lines == []  # spans of 70 and 20 rows: nothing is chunked, nothing to check


def test_final_layer_self_check_failure_is_logged_not_raised(pack, caplog):
    fl = FakeFinal()
    fl.video_out, fl.audio_out = RowWiseHead(12), RowWiseHead(5)
    cfl = streamed(pack).ChunkedFinalLayer(fl, 30, "streamed", self_check=True)
    x = torch.randn(100, S_HIDDEN).to(torch.bfloat16)
    t = torch.randn(2, 8, dtype=torch.bfloat16)

    def broken(*a, **k):
        raise RuntimeError("out of memory (simulated)")

    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"), torch.no_grad(), \
            mock_forward(type(fl), broken):
        out = cfl(x, t, (30, 100, 1), (10, 30, 0))
    assert out[0].shape == (70, 12) and out[1].shape == (20, 5)
    lines = [r.getMessage() for r in caplog.records if "self_check final layer" in r.getMessage()]
    assert lines == ["[h3stream] self_check final layer failed: RuntimeError: out of memory "
                     "(simulated)"], lines


class mock_forward:
    """Replace cls.forward for a with-block."""

    def __init__(self, cls, fn):
        self.cls, self.fn = cls, fn

    def __enter__(self):
        self.old = self.cls.forward
        self.cls.forward = self.fn

    def __exit__(self, *exc):
        self.cls.forward = self.old


class FakeFinalUpstream(FakeFinal):
    """Upstream ComfyUI's FinalLayer: forward takes (sigma, sample_sigmas, shifts) too, and
    `bank` heads per stream (a PDD head bank) blend by sigma (here: pick one)."""

    def __init__(self, bank=1):
        super().__init__()
        self.video_out = nn.Linear(S_HIDDEN, 12 * bank, dtype=torch.float32)
        self.video_out.out_features = 12
        self.bank = bank

    def forward(self, x, t_emb, video_seg, audio_seg, sigma, sample_sigmas, shifts):
        self.calls = getattr(self, "calls", 0) + 1
        v, a = super().forward(x, t_emb, video_seg, audio_seg)
        head = int(sigma * 10) % self.bank
        return v[:, 12 * head:12 * (head + 1)], a


def test_chunked_final_layer_takes_upstreams_call(pack):
    """Upstream's 7-argument call: one head per stream and a mod row per span chunk as
    before (the stock bits); a PDD head bank or per-token rows run the layer's own forward
    (logged once)."""
    torch.manual_seed(1)
    x = torch.randn(100, S_HIDDEN).to(torch.bfloat16)
    t = torch.randn(2, 8, dtype=torch.bfloat16)
    extra = (0.35, torch.tensor([1.0, 0.35, 0.0]), (12.0, 3.0))
    per_token = (30, 100, torch.tensor([0] * 40 + [1] * 30, dtype=torch.int64))
    with torch.no_grad():
        for fl, segs, own in ((FakeFinalUpstream(), ((30, 100, 1), (10, 30, 0)), False),
                              (FakeFinalUpstream(bank=3), ((30, 100, 1), (10, 30, 0)), True),
                              (FakeFinalUpstream(), (per_token, (10, 30, 0)), True)):
            ref = fl(x, t, *segs, *extra)
            got = streamed(pack).ChunkedFinalLayer(fl, 7, "exact", 0)(x, t, *segs, *extra)
            assert fl.calls == (2 if own else 1)  # the layer's own forward ran, or the chunks
            for r, g in zip(ref, got):
                assert torch.equal(r, g)
    said = streamed(pack)._said
    assert any("PDD head bank" in k[1] for k in said if k[0] == "final_layer"), said
    assert any("per-token" in k[1] for k in said if k[0] == "final_layer"), said


def test_node_inputs_are_the_controls(pack):
    ns = streamed(pack)
    spec = ns.H3StreamedBlocks.INPUT_TYPES()
    ctl = sys.modules["h3s_comfyui_pack.h3_controls"]
    assert list(spec["required"]) == ["model"]  # the only required input (docs/FEATURES.md)
    assert list(spec["optional"]) == [c.name for c in ctl.CONTROLS]
    with pytest.raises(ValueError, match="MiniMax-H3"):
        p = FakePatcher()
        del p.model.diffusion_model.final_layer
        ns.apply_streamed(p, {}, h3=make_fake_h3())


def test_on_the_fly_patches_run_in_h3stream_as_comfyui_casts_them(pack, caplog):
    """LoRA in low-VRAM mode (a weight_function on the module): the node no longer falls
    back; h3stream gets the weight ComfyUI's own cast returns (patched), and every cast
    is handed back."""
    import fake_comfy_ops

    h3 = make_fake_h3()
    p = FakePatcher()
    qkv = p.model.diffusion_model.blocks[0].attn.qkv_proj
    qkv.weight_function = [lambda w: w * 2]
    m = streamed(pack).apply_streamed(p, {"min_tokens": 0, "final_layer_chunk": 0}, h3=h3)
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        x = fake_forward(m)
    assert torch.all(x == 3)  # both blocks took the h3stream path
    assert not [r for r in caplog.records if "runs instead" in r.getMessage()]
    eng = streamed(pack)._engines[next(iter(streamed(pack)._engines))][1]
    assert torch.equal(eng.weights[0]["blocks.0.attn.qkv_proj.weight"], qkv.weight * 2)
    assert torch.equal(eng.weights[1]["blocks.1.attn.qkv_proj.weight"],
                       p.model.diffusion_model.blocks[1].attn.qkv_proj.weight)
    assert len(fake_comfy_ops.CASTS) == 2 * 7  # 5 linears + norm1 + norm2 per block
    assert sorted(map(id, fake_comfy_ops.CASTS)) == sorted(map(id, fake_comfy_ops.UNCASTS))


def test_bypass_patched_modules_fall_back_once(pack, caplog):
    h3 = make_fake_h3()
    p = FakePatcher()
    fc1 = p.model.diffusion_model.blocks[1].mlp.fc1
    fc1.forward = lambda x: x  # what a bypass LoRA does to the instance
    m = streamed(pack).apply_streamed(p, {"min_tokens": 0, "final_layer_chunk": 0}, h3=h3)
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        x = fake_forward(m)
    assert torch.all(x == 4)  # block 0 h3stream (+1), block 1 ComfyUI (x2)
    lines = [r.getMessage() for r in caplog.records if "bypass" in r.getMessage()]
    assert len(lines) == 1 and "block 1" in lines[0], lines


def test_mlp_chunk_zero_casts_only_the_attention_half(pack, monkeypatch):
    import fake_comfy_ops

    h3 = make_fake_h3(attn_only=True)
    ns = streamed(pack)
    monkeypatch.setattr(ns, "comfy_mlp_half", lambda block, x, t, s: x)
    m = ns.apply_streamed(FakePatcher(), {"min_tokens": 0, "mlp_chunk": 0}, h3=h3)
    fake_forward(m)
    blocks = m.model.diffusion_model.blocks
    mlps = {id(b.mlp.fc1) for b in blocks} | {id(b.mlp.fc2) for b in blocks}
    assert fake_comfy_ops.CASTS and not mlps & set(map(id, fake_comfy_ops.CASTS))
    eng = ns._engines[next(iter(ns._engines))][1]
    assert "blocks.0.mlp.fc1.weight" in eng.weights[0]  # still there, uncast (never read)


def test_a_pdd_head_bank_gives_the_engine_its_first_head(pack):
    """Upstream ComfyUI's PDD checkpoints hold several output heads per stream; the engine
    (blocks only) reads the config from the first, the model's own final layer blends them."""
    h3 = make_fake_h3()
    p = FakePatcher()
    fl = p.model.diffusion_model.final_layer
    fl.video_out = nn.Linear(S_HIDDEN, 3 * 12, dtype=torch.float32)
    fl.video_out.out_features = 12
    m = streamed(pack).apply_streamed(p, {"min_tokens": 0}, h3=h3)
    fake_forward(m)
    assert h3.config_shapes["final_layer.video_out.weight"] == (12, S_HIDDEN)
    assert h3.config_shapes["final_layer.video_out.bias"] == (12,)
    assert h3.config_shapes["final_layer.audio_out.weight"] == (5, S_HIDDEN)
    assert fl.video_out.weight.shape == (36, S_HIDDEN)  # the model is untouched


def test_trim_forward_is_off_under_a_malloc_graph(pack, monkeypatch, caplog):
    """Upstream ComfyUI with dynamic VRAM records each forward's allocations in a malloc
    graph that owns the embeds: the node leaves them to it (one log line)."""
    prefetch = types.ModuleType("comfy.model_prefetch")
    prefetch.malloc_graph_enabled = lambda device: True
    monkeypatch.setitem(sys.modules, "comfy.model_prefetch", prefetch)
    tf = sys.modules["h3s_comfyui_pack.trim_forward"]
    holder = tf.EmbedHolder()
    seen = []

    def executor(x, *args, **kwargs):
        seen.append(holder.dtype)
        return x
    context = torch.zeros(1, 3, 8, dtype=torch.bfloat16)
    with caplog.at_level(logging.INFO, logger="h3stream.comfyui"):
        for _ in range(2):
            tf.diffusion_wrapper(holder)(executor, [torch.zeros(2)], None, context=context)
    assert seen == [None, None]  # the projections ran unchanged: nothing recorded to free
    assert len([r for r in caplog.records if "malloc graph" in r.getMessage()]) == 1
    prefetch.malloc_graph_enabled = lambda device: False
    tf.diffusion_wrapper(holder)(executor, [torch.zeros(2)], None, context=context)
    assert seen[-1] == torch.bfloat16


@pytest.mark.parametrize("trim", [True, False])
def test_trim_forward_frees_the_patch_embeds_at_block_0(pack, trim):
    """ComfyUI's _forward keeps video_embed alive through the blocks; with trim_forward
    the node's patch projection produces it (the same fp32 GEMM and one rounding to the
    compute dtype) and block 0 frees it, leaving the packed sequence bit for bit as is."""
    h3 = make_fake_h3()
    p = FakePatcher()
    dm = p.model.diffusion_model
    torch.manual_seed(3)
    dm.video_patch_proj = nn.Linear(12, S_HIDDEN)  # fp32, like ComfyUI's island
    m = streamed(pack).apply_streamed(p, {"min_tokens": 0, "trim_forward": trim,
                                          "final_layer_chunk": 0}, h3=h3)
    to = m.model_options["transformer_options"]
    patched = {k.split(".")[1]: v for k, v in m.object_patches.items()
               if k.endswith("patch_proj.forward")}
    assert bool(patched) == trim
    rows = torch.randn(64, 12)
    context = torch.zeros(1, 3, 8, dtype=torch.bfloat16)
    seen = {}

    def model_forward(x, timestep, context=None):  # the part of _forward that matters
        proj = patched.get("video_patch_proj", dm.video_patch_proj)
        video_embed = proj(rows).to(context.dtype)
        h = torch.empty(64, S_HIDDEN, dtype=context.dtype)
        h[:] = video_embed
        seen["h"] = h.clone()
        for i in range(len(dm.blocks)):
            rep = to["patches_replace"]["dit"][("double_block", i)]
            args = {"img": h, "t_emb": torch.randn(1, 8, dtype=torch.bfloat16),
                    "mod_segments": [(0, 64, 0)],
                    "rope_freqs": torch.randn(1, 64, 1, 48, 2, 2).to(torch.bfloat16),
                    "transformer_options": to}
            h = rep(args, {"original_block": lambda a: {"img": a["img"]}})["img"]
            if i == 0:
                seen["after_block0"] = video_embed.untyped_storage().nbytes()
        return h

    wrappers = to.get("wrappers", {}).get("diffusion_model", {})
    fn = wrappers.get("h3stream_trim_forward", [None])[0]
    if fn:
        fn(model_forward, [rows], None, context=context)
    else:
        model_forward([rows], None, context=context)
    want = dm.video_patch_proj(rows).to(torch.bfloat16)
    assert torch.equal(seen["h"], want)  # the same math with or without the trim
    assert (seen["after_block0"] == 0) == trim


def test_offloaded_casts_are_copied_and_handed_back_before_the_next(pack):
    """ComfyUI's cast buffer for offloaded weights is reused by its next cast: the node
    copies each such cast and hands it back before casting the next module, so every
    tensor h3stream gets holds its own module's values."""
    import fake_comfy_ops

    fake_comfy_ops.REUSE_BUFFER[0] = True
    h3 = make_fake_h3()
    p = FakePatcher()
    blocks = p.model.diffusion_model.blocks
    torch.manual_seed(0)
    for b in blocks:  # distinct values in same-shaped weights
        for mod in (b.attn.out_proj, b.mlp.fc2):
            mod.weight.data.normal_()
    m = streamed(pack).apply_streamed(p, {"min_tokens": 0, "final_layer_chunk": 0}, h3=h3)
    fake_forward(m)
    eng = streamed(pack)._engines[next(iter(streamed(pack)._engines))][1]
    for i, b in enumerate(blocks):
        w = eng.weights[i]
        assert torch.equal(w[f"blocks.{i}.attn.out_proj.weight"], b.attn.out_proj.weight)
        assert torch.equal(w[f"blocks.{i}.mlp.fc2.weight"], b.mlp.fc2.weight)
    kinds = [k for k, _ in fake_comfy_ops.EVENTS]
    assert kinds == ["cast", "uncast"] * (len(kinds) // 2)  # each handed back at once


def test_the_bundled_workflow_is_valid_for_the_nodes_inputs(pack):
    """workflows/*.json: each of our nodes' inputs known, required ones given, combo
    values among the options, numbers in range and on their step (what ComfyUI's
    /prompt validation and scripts/comfyui_e2e.py check)."""
    ns = streamed(pack)
    ours = {"H3StreamedBlocks": ns.H3StreamedBlocks}
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "workflows")
    checked = 0
    for name in sorted(os.listdir(folder)):
        wf = json.load(open(os.path.join(folder, name)))
        for nid, node in wf.items():
            cls = ours.get(node["class_type"])
            if cls is None:
                continue  # ComfyUI's own nodes: checked by scripts/comfyui_e2e.py
            spec = cls.INPUT_TYPES()
            inputs = {**spec["required"], **spec.get("optional", {})}
            assert set(node["inputs"]) <= set(inputs), f"{name} {nid}: unknown inputs"
            assert set(spec["required"]) <= set(node["inputs"]), f"{name} {nid}: missing"
            for key, value in node["inputs"].items():
                typ, opts = inputs[key][0], inputs[key][1] if len(inputs[key]) > 1 else {}
                if isinstance(value, list):
                    continue  # a link to another node's output
                if isinstance(typ, list):
                    assert value in typ, f"{name} {nid}: {key}={value!r} not in {typ}"
                elif typ == "INT":
                    assert opts["min"] <= value <= opts["max"], f"{name} {nid}: {key}={value}"
                    assert value % opts.get("step", 1) == 0, f"{name} {nid}: {key}={value}"
            checked += 1
    assert checked >= 1, "no H3 Streamed Blocks node in the bundled workflows"
