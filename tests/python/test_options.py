"""Options: every control, validated where it is set, errors naming it."""

import copy

import pytest

import h3stream


def test_defaults_are_the_reference_nodes():
    o = h3stream.Options()
    assert o.to_dict() == {
        "q_chunk": 16384, "kv_chunk": 16384, "mlp_chunk": 16384, "min_tokens": 32768,
        "kv_block": 0, "final_layer_chunk": 16384, "final_layer_gemm": "exact",
        "kv_store": "bf16", "kv_mix_heads": [], "kv_mix_count": 0, "exact_av_rows": False, "trim_forward": True, "self_check": False, "merge_tail_below": 512,
        "kv_placement": "auto", "host_budget": 0, "vram_budget": 0,
    }


def test_round_trip_through_dict_and_copy():
    o = h3stream.Options(q_chunk=3, kv_chunk=5, mlp_chunk=0, min_tokens=0, kv_block=256,
                         final_layer_chunk=7, final_layer_gemm="streamed", trim_forward=False,
                         self_check=True, merge_tail_below=0, kv_placement="host",
                         host_budget=1 << 30)
    assert h3stream.Options(**o.to_dict()) == o
    assert "kv_placement='host'" in repr(o) and o.host_budget == 1 << 30
    c = copy.copy(o)
    c.q_chunk = 9
    assert o.q_chunk == 3 and c.q_chunk == 9
    assert "q_chunk=3" in repr(o)


@pytest.mark.parametrize("control,value,message", [
    ("q_chunk", 0, r"q_chunk = 0 is out of range: it must be >= 1"),
    ("kv_chunk", -1, r"kv_chunk = -1 is out of range: it must be >= 1"),
    ("mlp_chunk", -5, r"mlp_chunk = -5 is out of range: it must be >= 0"),
    ("min_tokens", -1, r"min_tokens = -1 is out of range"),
    ("kv_block", 100, r"kv_block = 100 must be 0 or a multiple of"),
    ("final_layer_chunk", -2, r"final_layer_chunk = -2 is out of range"),
    ("merge_tail_below", -1, r"merge_tail_below = -1 is out of range"),
    ("kv_store", "kvi4", r"kv_store 'kvi4' is not available"),
    ("kv_mix_heads", [3, 3], r"kv_mix_heads: head 3 is listed twice"),
    ("kv_mix_heads", [-1], r"kv_mix_heads: head -1 is negative"),
    ("kv_mix_count", -1, r"kv_mix_count = -1 is out of range"),
    ("final_layer_gemm", "fast", r"final_layer_gemm 'fast' is not valid: use exact or streamed"),
    ("kv_placement", "gpu", r"kv_placement 'gpu' is not valid: use auto, device or host"),
    ("vram_budget", -1, r"vram_budget = -1 is out of range: it must be >= 0 bytes"),
    ("host_budget", -5, r"host_budget = -5 is out of range: it must be >= 0 bytes"),
])
def test_bad_values_name_the_control(control, value, message):
    with pytest.raises(ValueError, match=message):
        h3stream.Options(**{control: value})
    o = h3stream.Options()
    before = o.to_dict()
    with pytest.raises(ValueError, match=message):
        setattr(o, control, value)
    assert o.to_dict() == before, "a refused value must not be kept"


def test_a_setter_checks_the_whole_set():
    # An approximate store cannot be host-staged: refused whichever control is set last.
    with pytest.raises(ValueError, match="kv_placement = host"):
        h3stream.Options(kv_store="kvi8r", kv_placement="host")
    o = h3stream.Options(kv_store="kvi8r")
    with pytest.raises(ValueError, match="kv_placement = host"):
        o.kv_placement = "host"
    assert o.kv_placement == "auto", "a refused value must not be kept"
    h = h3stream.Options(kv_placement="host")
    with pytest.raises(ValueError, match="kv_placement = host"):
        h.kv_store = "kvfp4s"
    assert h.kv_store == "bf16"


def test_kvmix_heads_round_trip():
    o = h3stream.Options(kv_store="kvmix", kv_mix_heads=[5, 0])
    assert o.kv_mix_heads == [0, 5] and "kv_mix_heads=[0, 5]" in repr(o)
    assert h3stream.Options(**o.to_dict()) == o
    later = h3stream.Options(kv_store="kvmix")
    later.kv_mix_heads = [5, 0]  # the setter keeps the set sorted too
    assert later.kv_mix_heads == [0, 5] and later == o and repr(later) == repr(o)
    with pytest.raises(ValueError, match="give the heads or the count, not both"):
        h3stream.Options(kv_store="kvmix", kv_mix_heads=[1, 2], kv_mix_count=3)


def test_keywords_only_and_types():
    with pytest.raises(TypeError):
        h3stream.Options(1024)
    with pytest.raises(TypeError):
        h3stream.Options(q_chunk="big")


def test_stock_options():
    s = h3stream.Options.stock()
    assert s.final_layer_chunk == 0 and s.trim_forward is False
