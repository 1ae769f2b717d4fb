"""The node's controls are docs/FEATURES.md's: same names, types, defaults, ranges; honest
tooltips. The table is the repository's own, so these tests run (and fail, never skip) on
every checkout."""

import importlib.util
import os
import re
import sys

import pytest

from conftest import PACK, features_md, need


def _controls():
    spec = importlib.util.spec_from_file_location("h3_controls_t", os.path.join(PACK, "h3_controls.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["h3_controls_t"] = mod
    spec.loader.exec_module(mod)
    return mod


def _features_rows():
    """{name: (type cell, meaning cell)} of the first table under "## Controls"."""
    path = features_md()
    assert os.path.exists(path), f"{path} is missing: it states the node's controls"
    text = open(path, encoding="utf-8").read()
    assert "\n## Controls\n" in text, f"{path} has no '## Controls' section"
    section = text.split("\n## Controls\n", 1)[1].split("\n## ", 1)[0]
    rows, in_table = {}, False
    for line in section.splitlines():
        if not line.startswith("|"):
            if in_table:
                break  # the first table only
            continue
        in_table = True
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0] not in ("name", "") and not set(cells[0]) <= set("-"):
            assert cells[0] not in rows, f"docs/FEATURES.md lists {cells[0]} twice"
            rows[cells[0]] = (cells[1], cells[2])
    assert rows, f"no control table under '## Controls' in {path}"
    return rows


def test_features_md_table_is_the_nodes_controls():
    ctl = _controls()
    rows = _features_rows()
    assert rows.pop("model")[0] == "MODEL"
    assert set(rows) == set(ctl.BY_NAME), (
        f"docs/FEATURES.md lists {sorted(set(rows) - set(ctl.BY_NAME))} that the node lacks; "
        f"the node has {sorted(set(ctl.BY_NAME) - set(rows))} that docs/FEATURES.md lacks")
    for name, (spec, meaning) in rows.items():
        c = ctl.BY_NAME[name]
        assert len(meaning) > 20, f"{name}: docs/FEATURES.md gives no meaning"
        m = re.fullmatch(r"int (\d+), (\d+)\.\.(\d+)(?:, step (\d+))?(?: \(\w+\))?", spec)
        if m:
            assert c.kind == "INT", name
            assert (c.default, c.min, c.max) == tuple(int(v) for v in m.groups()[:3]), name
            assert c.step == int(m.group(4) or 1), name
            continue
        m = re.fullmatch(r"bool (true|false)", spec)
        if m:
            assert c.kind == "BOOLEAN" and c.default == (m.group(1) == "true"), name
            continue
        m = re.fullmatch(r'string "(.*)"', spec)
        if m:
            assert c.kind == "STRING" and c.default == m.group(1), name
            continue
        # a choice, the default first: "exact / streamed", "bf16 (exact) / kvi8r / ..."
        choices = tuple(re.sub(r"\s*\(.*\)", "", s).strip() for s in spec.split("/"))
        assert len(choices) > 1, f"{name}: unreadable type cell {spec!r}"
        assert c.kind == "COMBO" and c.default == choices[0], name
        assert tuple(c.choices) == choices, name


def test_placement_controls_become_engine_options():
    ctl = _controls()
    kw = ctl.engine_options_kwargs({"vram_budget": 6144, "kv_placement": "host"})
    assert kw["vram_budget"] == 6144 << 20 and kw["kv_placement"] == "host"
    assert ctl.engine_options_kwargs({})["vram_budget"] == 0
    with pytest.raises(ValueError, match="kv_placement = 'gpu' is not one of auto, device, host"):
        ctl.checked({"kv_placement": "gpu"})


def test_every_built_kv_tier_is_offered_and_labelled_approximate():
    ctl = _controls()
    assert ctl.BY_NAME["kv_store"].choices == ("bf16", "kvi8r", "kvi8s", "kvfp4s", "kvmix")
    tip = ctl.BY_NAME["kv_store"].tooltip
    assert "APPROXIMATE" in tip and "logs one line and runs the exact store" in tip
    assert ctl.engine_options_kwargs({"kv_store": "kvi8r"})["kv_store"] == "kvi8r"


def test_kvmix_head_controls_become_engine_options():
    ctl = _controls()
    kw = ctl.engine_options_kwargs({"kv_store": "kvmix"})
    assert kw["kv_mix_heads"] == [] and kw["kv_mix_count"] == 0
    kw = ctl.engine_options_kwargs({"kv_store": "kvmix", "kv_mix_heads": " 9,0, 5"})
    assert kw["kv_mix_heads"] == [0, 5, 9]
    assert ctl.engine_options_kwargs({"kv_mix_count": 20})["kv_mix_count"] == 20
    t, o = ctl.BY_NAME["kv_mix_heads"].comfy_input()
    assert t == "STRING" and o["default"] == "" and "APPROXIMATE" in o["tooltip"]
    for bad, msg in ((" 1,,2", "'' is not a head index"), ("1,x", "'x' is not a head index"),
                     ("-3", "'-3' is not a head index"), ("2,2", "listed twice"),
                     ("1,", "'' is not a head index")):
        with pytest.raises(ValueError, match=msg):
            ctl.checked({"kv_mix_heads": bad})
    with pytest.raises(ValueError, match="kv_mix_count = -1 is outside 0..1024"):
        ctl.checked({"kv_mix_count": -1})


def test_tooltips_are_there_and_say_where_a_control_does_nothing_here():
    ctl = _controls()
    for c in ctl.CONTROLS:
        assert len(c.tooltip) > 40, c.name
    assert "frees them when block 0 starts" in ctl.BY_NAME["trim_forward"].tooltip
    assert "bit for bit" in ctl.BY_NAME["exact_av_rows"].tooltip
    assert "Exact" in ctl.BY_NAME["q_chunk"].tooltip


def test_tooltips_say_what_and_the_trade_off_never_a_speed_figure():
    # Speeds go stale with every kernel; they live in docs/PERFORMANCE.md with their files.
    ctl = _controls()
    speed = re.compile(r"(?<![\w.])\d+(?:\.\d+)?\s*(?:x|ms|s)\b|TFLOP|TOPS|PyTorch-")
    for c in ctl.CONTROLS:
        assert not speed.search(c.tooltip), f"{c.name}'s tooltip quotes a speed: {speed.search(c.tooltip)[0]!r}"


def test_comfy_inputs_and_checks():
    ctl = _controls()
    t, o = ctl.BY_NAME["q_chunk"].comfy_input()
    assert t == "INT" and o == {"default": 16384, "min": 1024, "max": 262144, "step": 1,
                                "tooltip": ctl.BY_NAME["q_chunk"].tooltip}
    t, o = ctl.BY_NAME["final_layer_gemm"].comfy_input()
    assert t == ["exact", "streamed"] and o["default"] == "exact"
    assert ctl.checked({})["mlp_chunk"] == 16384
    for bad, msg in (({"q_chunk": 512}, "q_chunk = 512 is outside 1024..262144"),
                     ({"kv_block": 100}, "multiple of 128"),
                     ({"kv_store": "kvi4"}, "not one of bf16"),
                     ({"self_check": 1}, "not a boolean"),
                     ({"qchunk": 1}, "unknown control")):
        with pytest.raises(ValueError, match=msg):
            ctl.checked(bad)
    kw = ctl.engine_options_kwargs({"mlp_chunk": 0})
    assert kw["mlp_chunk"] == 0 and kw["exact_av_rows"] is False
    kw = ctl.engine_options_kwargs({"kv_store": "kvi8r", "exact_av_rows": True})
    assert kw["kv_store"] == "kvi8r" and kw["exact_av_rows"] is True


def test_kv_block_steps_by_the_engines_attention_tile():
    h3stream = need("h3stream")
    ctl = _controls()
    assert ctl.ATTN_KV_TILE == h3stream.ATTN_KV_TILE
    assert ctl.BY_NAME["kv_block"].step == h3stream.ATTN_KV_TILE
