"""A self-contained HTML/SVG timeline of the memory ledger (no scripts, no
external resources): one lane per forward with a bar per block (and the embed /
final spans around them), a memory chart, and a per-block table. Pure Python."""

import html
import json

GIB = float(1 << 30)
COLORS = {"h3stream": "#2f7ed8", "comfy": "#8d8d8d", "embed": "#f1a340", "final": "#998ec3",
          "kv": "#66c2a5", "attn": "#2f7ed8", "mlp": "#e78ac3"}


def _gib(v):
    return "-" if v is None else f"{v / GIB:.3f}"


def _ms(v):
    return "-" if v is None else f"{v:.2f}"


def _has_gpu(r):
    return r.get("gpu_start_ms") is not None and r.get("gpu_ms") is not None


def _span(r, clock):
    """(start_ms, duration_ms) of a record on one clock: "gpu" (event times within the
    forward) or "host" (enqueue times since the recorder started)."""
    if clock == "gpu":
        return r["gpu_start_ms"], r["gpu_ms"]
    return r.get("host_start_ms", 0.0), r.get("host_ms", 0.0)


def _lanes(records):
    forwards = {}
    for r in records:
        if r.get("phase") in ("embed", "block", "final"):
            forwards.setdefault(r["forward"], []).append(r)
    return forwards


def _timeline_svg(records, width=1100):
    lanes = _lanes(records)
    if not lanes:
        return "<p>No forward recorded yet.</p>"
    lane_h, top, left = 22, 24, 90
    # one clock per lane, never mixed: GPU event times when every step has them
    clocks = {f: "gpu" if all(_has_gpu(r) for r in rs) else "host" for f, rs in lanes.items()}
    origin = {f: min(_span(r, clocks[f])[0] for r in rs) for f, rs in lanes.items()}
    tmax = max(max(sum(_span(r, clocks[f])) - origin[f] for r in rs)
               for f, rs in lanes.items()) or 1.0
    scale = (width - left - 10) / tmax
    h = top + lane_h * len(lanes) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'font-family="monospace" font-size="11">']
    for k, (fwd, rs) in enumerate(sorted(lanes.items())):
        y = top + k * lane_h
        clock = clocks[fwd]
        out.append(f'<text x="4" y="{y + 14}">fwd {fwd} <tspan fill="#999999">{clock}</tspan></text>')
        for r in rs:
            s, d = _span(r, clock)
            s -= origin[fwd]
            color = COLORS.get(r.get("path") or r["phase"], "#bbbbbb")
            label = r["phase"] if r["phase"] != "block" else f"block {r['block']}"
            tip = (f"forward {fwd} {label} ({r.get('path') or '-'}), {d:.2f} ms ({clock} clock), "
                   f"tokens {r.get('tokens', '-')}, peak {_gib(r.get('peak'))} GiB, "
                   f"allocated {_gib(r.get('allocated'))} GiB, reserved {_gib(r.get('reserved'))} GiB")
            out.append(f'<rect x="{left + s * scale:.2f}" y="{y}" width="{max(d * scale, 0.8):.2f}" '
                       f'height="{lane_h - 4}" fill="{color}" stroke="#ffffff" stroke-width="1">'
                       f'<title>{html.escape(tip)}</title></rect>')
            if d * scale > 8 * len(label):
                out.append(f'<text x="{left + (s + d / 2) * scale:.2f}" y="{y + 13}" fill="#ffffff" '
                           f'text-anchor="middle">{html.escape(label)}</text>')
    for i in range(6):  # axis
        t = tmax * i / 5
        x = left + t * scale
        out.append(f'<line x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{h - 26}" stroke="#dddddd"/>')
        out.append(f'<text x="{x:.1f}" y="{h - 12}" text-anchor="middle">{t:.1f} ms</text>')
    out.append("</svg>")
    return "".join(out)


def _memory_svg(records, width=1100, height=220):
    pts = [r for r in records if r.get("phase") in ("embed", "block", "final")
           and r.get("allocated") is not None]
    if not pts:
        return "<p>No device memory recorded (CPU run).</p>"
    left, top, bottom = 60, 10, 30
    series = {"peak": "#d7301f", "allocated": "#2f7ed8", "reserved": "#8d8d8d"}
    vmax = max(max(r.get(k) or 0 for k in series) for r in pts) or 1
    n = len(pts)
    sx = (width - left - 10) / max(n - 1, 1)
    sy = (height - top - bottom) / vmax
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="11">']
    for i in range(5):
        v = vmax * i / 4
        y = height - bottom - v * sy
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 10}" y2="{y:.1f}" stroke="#eeeeee"/>')
        out.append(f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{v / GIB:.2f}</text>')
    for k, color in series.items():
        coords = " ".join(f"{left + i * sx:.1f},{height - bottom - (r.get(k) or 0) * sy:.1f}"
                          for i, r in enumerate(pts))
        out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="1.5">'
                   f'<title>{k} (GiB)</title></polyline>')
    x = left
    for k, color in series.items():
        out.append(f'<rect x="{x}" y="{height - 14}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{x + 14}" y="{height - 5}">{k}</text>')
        x += 110
    out.append(f'<text x="{width - 10}" y="{height - 5}" text-anchor="end">'
               f'GiB per step (embed, each block, final; {n} steps)</text></svg>')
    return "".join(out)


def _table(records):
    phases = {}
    for r in records:
        if r.get("phase") in ("kv", "attn", "mlp"):
            phases.setdefault((r["forward"], r["block"]), {})[r["phase"]] = r
    rows = []
    for r in records:
        if r.get("phase") not in ("embed", "block", "final"):
            continue
        p = phases.get((r["forward"], r.get("block")), {})
        arena = " / ".join(_gib(p[k].get("arena_peak")) if k in p else "-"
                           for k in ("kv", "attn", "mlp"))
        predicted = " / ".join(_gib(p[k].get("arena_predicted")) if k in p else "-"
                               for k in ("kv", "attn", "mlp"))
        first = next(iter(p.values()), {})
        kv = first.get("kv_placement") or "-"
        staged = (f"{_gib(first.get('staged_to_host'))} / {_gib(first.get('staged_to_device'))}"
                  if first.get("staged_to_host") else "-")
        copies = "-"
        if first.get("copy_s") is not None:
            exposed = first.get("exposed_copy_s")
            copies = (f"{_ms(1e3 * first['copy_s'])} / "
                      f"{_ms(1e3 * exposed) if exposed is not None else '-'}")
        rows.append(
            "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
                r["forward"], r["phase"] if r["phase"] != "block" else r["block"],
                r.get("path") or "-", r.get("tokens", "-"), _ms(r.get("gpu_ms")),
                _ms(r.get("host_ms")), _gib(r.get("allocated")), _gib(r.get("peak")),
                _gib(r.get("reserved")), _gib(r.get("host_rss")), arena, predicted, kv,
                staged, copies)) + "</tr>")
    head = ("forward", "block", "path", "tokens", "gpu ms", "host ms", "allocated GiB",
            "peak GiB", "reserved GiB", "host RSS GiB", "h3stream arena peak kv / attn / mlp GiB",
            "predicted kv / attn / mlp GiB", "K/V", "staged out / back GiB",
            "copy ms total / exposed (the rest hid under compute)")
    return ("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows)
            + "</table>")


def render(records, title="h3stream memory ledger"):
    """The whole HTML page for these ledger records (dicts as written to the JSONL)."""
    peak = max((r.get("peak") or 0 for r in records), default=0)
    reserved = max((r.get("reserved") or 0 for r in records), default=0)
    rss = max((r.get("host_rss") or 0 for r in records), default=0)
    arena = max((r.get("arena_peak") or 0 for r in records), default=0)
    forwards = len({r["forward"] for r in records if "forward" in r})
    summary = (f"{forwards} forward(s), {len(records)} records; device peak {_gib(peak)} GiB "
               f"(PyTorch allocator), reserved {_gib(reserved)} GiB, h3stream arena peak "
               f"{_gib(arena)} GiB, host RSS max {_gib(rss)} GiB")
    note = ("Times: per forward either GPU event times (recorded on the current stream,\n"
            "read back without a device sync) or, where any are missing, host enqueue times (the clock is\n"
            "named beside each lane). Memory:\n"
            "PyTorch caching-allocator counters at the end of each step, peak since its start; the\n"
            "h3stream arena (its own device memory) per kv / attn / mlp phase. Hover a bar for details.")
    return page(title, summary, note, [("Timeline", _timeline_svg(records)),
                                       ("Device memory", _memory_svg(records)),
                                       ("Per step", _table(records))], records, "ledger")


def page(title, summary, note, sections, data, data_id):
    """A self-contained HTML page (no scripts to run, no external resources): title, a
    summary line (text), a note (HTML), (heading, html) sections, and `data` embedded as JSON in a
    <script type="application/json" id=data_id> element. Shared by the probes' pages."""
    blob = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    body = "\n".join(f"<h3>{html.escape(h)}</h3>\n{content}" for h, content in sections)
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: sans-serif; margin: 16px; color: #222; }}
table {{ border-collapse: collapse; font-size: 12px; font-family: monospace; }}
td, th {{ border: 1px solid #ddd; padding: 2px 6px; text-align: right; }}
th {{ background: #f4f4f4; }}
.note {{ color: #666; font-size: 12px; }}
</style></head><body>
<h2>{html.escape(title)}</h2>
<p>{html.escape(summary)}</p>
<p class="note">{note}</p>
{body}
<script type="application/json" id="{html.escape(data_id)}">{blob}</script>
</body></html>
"""
