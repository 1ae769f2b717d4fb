#!/usr/bin/env python3
"""Summarise an H3S_STAGE_TRACE file (the CUDA stage queue's timeline).

Each queue the run created appends its records as JSON lines: copies
({"kind": "copy", "dir": "in"|"out", "bytes", "rows", "t0_ms", "t1_ms"}) and
waits of the compute stream on them ({"kind": "wait", "t0_ms", "t1_ms"}),
times in ms from the queue's creation, after a {"kind": "queue"} line. This
prints one summary per queue:
bytes and rate per direction and copy shape, the busy time of each copy
stream, and the waits longer than --min-wait-ms with the copies around them.

    usage: stage-trace.py TRACE.jsonl [--min-wait-ms 0.5] [--json]
"""
import argparse
import json
import sys


def queues(records):
    """Splits the records into one list per queue: each queue writes a
    {"kind": "queue"} line, then its records, when it is destroyed."""
    out = []
    for r in records:
        if r.get("kind") == "queue" or not out:
            out.append([])
        if r.get("kind") != "queue":
            out[-1].append(r)
    return [q for q in out if q]


def busy(intervals):
    """Total length of the union of [t0, t1) intervals."""
    total, end = 0.0, None
    for t0, t1 in sorted(intervals):
        if end is None or t0 > end:
            total += t1 - t0
            end = t1
        elif t1 > end:
            total += t1 - end
            end = t1
    return total


def summarise(rs, min_wait):
    copies = sorted((r for r in rs if r["kind"] == "copy"), key=lambda r: r["t0_ms"])
    waits = sorted((r for r in rs if r["kind"] == "wait"), key=lambda r: r["t0_ms"])
    span = max((r["t1_ms"] for r in rs), default=0) - min((r["t0_ms"] for r in rs), default=0)
    s = {"span_ms": round(span, 3), "copies": len(copies), "waits": len(waits)}
    for d in ("in", "out"):
        cs = [c for c in copies if c["dir"] == d]
        by_shape = {}
        for c in cs:
            k = c["bytes"]
            e = by_shape.setdefault(k, {"n": 0, "ms": 0.0, "rows": c["rows"]})
            e["n"] += 1
            e["ms"] += c["t1_ms"] - c["t0_ms"]
        s[d] = {
            "bytes": sum(c["bytes"] for c in cs),
            "busy_ms": round(busy([(c["t0_ms"], c["t1_ms"]) for c in cs]), 3),
            "shapes": [
                {"bytes": k, "rows": e["rows"], "n": e["n"],
                 "gb_s": round(k * e["n"] / (e["ms"] * 1e6), 2) if e["ms"] > 0 else None}
                for k, e in sorted(by_shape.items(), key=lambda kv: -kv[1]["n"] * kv[0])
            ],
        }
    exposed = [(w["t1_ms"] - w["t0_ms"], w) for w in waits]
    s["exposed_ms"] = round(sum(e for e, _ in exposed), 3)
    s["long_waits"] = [
        {"at_ms": round(w["t0_ms"], 3), "ms": round(e, 3)} for e, w in exposed if e >= min_wait
    ]
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--min-wait-ms", type=float, default=0.5)
    a = ap.parse_args()
    with open(a.trace) as f:
        records = [json.loads(line) for line in f if line.strip()]
    for i, q in enumerate(queues(records)):
        print(json.dumps({"queue": i, **summarise(q, a.min_wait_ms)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
