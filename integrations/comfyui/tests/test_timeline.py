"""The HTML timeline is one self-contained page: no external resources, parseable,
the ledger embedded as JSON."""

import html.parser
import importlib.util
import json
import os

from conftest import PACK


def _timeline():
    spec = importlib.util.spec_from_file_location("h3_timeline_t", os.path.join(PACK, "h3_timeline.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _records():
    recs = []
    for f in (1, 2):
        t = 0.0
        recs.append({"forward": f, "phase": "embed", "block": None, "tokens": 4096, "host_start_ms": t,
                     "host_ms": 1.0, "gpu_start_ms": 0.0, "gpu_ms": 0.5, "allocated": 1 << 30,
                     "peak": 3 << 29, "reserved": 2 << 30, "host_rss": 5 << 30})
        for b in range(3):
            recs.append({"forward": f, "phase": "block", "block": b, "path": "h3stream", "tokens": 4096,
                         "host_start_ms": 1.0 + b, "host_ms": 1.0, "gpu_start_ms": 0.5 + b * 2.0,
                         "gpu_ms": 2.0, "allocated": 1 << 30, "peak": 2 << 30, "reserved": 2 << 30,
                         "host_rss": 5 << 30})
            for p in ("kv", "attn", "mlp"):
                recs.append({"forward": f, "phase": p, "block": b, "path": "h3stream",
                             "arena_peak": 123456789, "arena_allocated": 0,
                             "arena_predicted": 987654321, "kv_placement": "host-staged",
                             "staged_to_host": 3 << 30, "staged_to_device": 9 << 30,
                             "copy_s": 0.25, "exposed_copy_s": 0.0625})
        recs.append({"forward": f, "phase": "final", "block": None, "tokens": 4096, "host_start_ms": 4.0,
                     "host_ms": 0.5, "gpu_start_ms": None, "gpu_ms": None, "allocated": None,
                     "peak": None, "reserved": None, "host_rss": None})
    return recs


class _Parser(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.external, self.script_json = [], [], None
        self._in_json = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        a = dict(attrs)
        for k in ("src", "href"):
            if k in a:
                self.external.append(a[k])
        self._in_json = tag == "script" and a.get("type") == "application/json"

    def handle_data(self, data):
        if self._in_json:
            self.script_json = data
            self._in_json = False


def test_page_is_self_contained_and_carries_the_ledger():
    tl = _timeline()
    page = tl.render(_records(), title="test")
    p = _Parser()
    p.feed(page)
    assert p.external == []
    assert p.tags.count("svg") == 2 and "table" in p.tags and p.tags.count("rect") >= 8
    assert json.loads(p.script_json) == _records()
    assert "2 forward(s)" in page and "block 2" in page
    # the placement: predicted beside measured, where the K/V lived, the bytes staged
    assert "predicted kv / attn / mlp GiB" in page and "0.920 / 0.920 / 0.920" in page
    assert "host-staged" in page and "3.000 / 9.000" in page
    assert "copy ms total / exposed" in page and "250.00 / 62.50" in page


def test_empty_and_cpu_ledgers_render():
    tl = _timeline()
    assert "No forward recorded yet" in tl.render([])
    cpu = [dict(r, allocated=None, peak=None, reserved=None) for r in _records()]
    assert "No device memory recorded" in tl.render(cpu)
