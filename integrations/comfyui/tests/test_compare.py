"""ulp distances: ordered encodings, sliced accumulation, p99 bucket, rel-rms."""

import importlib.util
import os

import pytest

from conftest import PACK, need

torch = need("torch")


def _cmp():
    spec = importlib.util.spec_from_file_location("h3_compare_t", os.path.join(PACK, "h3_compare.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _next_up(t, k=1):
    return (t.view(torch.int16) + k).view(torch.bfloat16)


@pytest.mark.parametrize("slice_", [1 << 24, 7])
def test_ulp_distances(slice_):
    c = _cmp()
    c.SLICE = slice_
    a = torch.tensor([1.0, -2.0, 3.5, 0.0, 100.0] * 20, dtype=torch.bfloat16)
    b = a.clone()
    b[0] = _next_up(a[0:1], 1)[0]
    b[1] = _next_up(a[1:2], 3)[0]  # more negative by 3 steps
    d = c.ulp_diff(a, b)
    assert (d["max_ulp"], d["differ"], d["count"], d["bit_equal"]) == (3, 2, 100, False)
    assert d["mean_ulp"] == pytest.approx(4 / 100)
    assert d["p99_ulp"] == 1  # 98 equal + one at 1 ulp cover 99 %
    e = c.ulp_diff(a, a.clone())
    assert e["bit_equal"] and e["max_ulp"] == 0 and e["p99_ulp"] == 0
    z = c.ulp_diff(torch.tensor([0.0], dtype=torch.bfloat16), torch.tensor([-0.0], dtype=torch.bfloat16))
    assert z["max_ulp"] == 0 and z["differ"] == 0 and not z["bit_equal"]  # +0 vs -0
    assert "bit-equal" in c.describe(e) and "p99 <= 1 ulp" in c.describe(d)


def test_rel_rms_and_fp32():
    c = _cmp()
    a = torch.tensor([3.0, 4.0])
    assert c.rel_rms(a, a) == 0.0
    assert c.rel_rms(torch.tensor([3.0, 5.0]), a) == pytest.approx(0.2)
    d = c.ulp_diff(a, torch.nextafter(a, torch.tensor(10.0)))
    assert d["max_ulp"] == 1 and d["differ"] == 2
