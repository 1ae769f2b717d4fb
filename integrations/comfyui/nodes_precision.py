"""H3 Precision Probe: per probed block, per projection input (attn.qkv_proj,
attn.out_proj, mlp.fc1, mlp.fc2) and per segment (text, audio, video), the activation
statistics (abs-max, RMS, outlier channels) and the relative error each cheaper
activation format would add (int8, int8 ConvRot, fp8 e4m3, NVFP4, NVFP4 after
Hadamard-16; h3_precision.py defines them), as JSONL plus a self-contained HTML page.

Mechanism: a block replacement (transformer_options["patches_replace"]["dit"]) on each
probed block. While a probed forward runs it, it adds forward hooks to that block's own
modules, runs the block, and removes the hooks again (in a finally, so an exception
removes them too): pre-hooks on qkv_proj, out_proj and fc1 read their inputs, and a
forward hook on fc1 reads fc1's output, from which fc2's input is silu(gate) * up
(ComfyUI folds that activation into fc2's call, comfy.ops.linear_input_act, so on an int8
model fc2 itself is never called as a module). Between calls no hook is attached.

The projections' inputs exist only when the model's own modules run: on a probed block
H3 Streamed Blocks (which computes the block in h3stream) gives way to ComfyUI's own block,
with the memory that needs; every other block keeps its path. Other replacements keep
running; a probed block whose replacement does not call the model's modules records
nothing (the console says so once).

Segments come from the block's own mod_segments ((begin, end, mod_row) runs of the packed
sequence): modality = mod_row % 3 (0 video, 1 text, 2 audio), the adaLN row the model
modulates those rows with (h3_precision.modality_runs).

A DIFFUSION_MODEL wrapper numbers the forwards; all device values of a forward are read
back with one copy when it ends, and the files are written then.
"""

import html
import json
import logging
import math
import os
import weakref

from . import h3_timeline
from .nodes_memory import output_stem, sampling_run_stem

log = logging.getLogger("h3stream.comfyui")
WRAPPER_KEY = "h3stream_precision_probe"
PROJECTIONS = ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2")
_said = set()


def _hp():
    """h3_precision (imported on first use: it needs torch, the pack loads without it)."""
    from . import h3_precision

    return h3_precision


def _say_once(key, line):
    if key not in _said:
        _said.add(key)
        log.warning(f"[h3stream] {line}")


def default_blocks(n):
    """Every 8th block and the last: 0, 8, ..., and n - 1."""
    return sorted(set(range(0, n, 8)) | ({n - 1} if n else set()))


def parse_blocks(spec, n):
    """Block indices from a control string: "" (every 8th block and the last), "all",
    or comma-separated indices, negative ones counting from the end ("0,1,-1")."""
    s = (spec or "").strip().lower()
    if s in ("", "default"):
        return default_blocks(n)
    if s == "all":
        return list(range(n))
    out = set()
    for part in s.replace(" ", "").split(","):
        if not part:
            continue
        try:
            i = int(part)
        except ValueError:
            raise ValueError(f"blocks {spec!r}: {part!r} is not a block index "
                             "(use indices like 0,1,-1, 'all', or empty)") from None
        if not -n <= i < n:
            raise ValueError(f"blocks {spec!r}: {i} is outside the model's {n} blocks")
        out.add(i % n)
    if not out:
        raise ValueError(f"blocks {spec!r} names no block")
    return sorted(out)


class PrecisionRecorder:
    """Collects one forward's measurements (device tensors), resolves them when the
    forward ends (one device-to-host copy) and writes the JSONL and HTML files."""

    def __init__(self, out_dir, stem, blocks, max_rows=4096, forwards=0):
        self.out_dir = out_dir
        self.blocks = frozenset(blocks)
        self.max_rows = int(max_rows)
        self.max_forwards = int(forwards)
        self.first_stem = stem
        self.sampling_runs = 0
        self._start(stem)

    def _start(self, stem):
        self.stem = stem
        self.jsonl_path = os.path.join(self.out_dir, stem + ".jsonl")
        self.html_path = os.path.join(self.out_dir, stem + ".html")
        self.forward = 0
        self.active = False
        self.records = []
        self._pending = []   # (meta dict, info dict, device vector)
        self._timestep = None

    def begin_sampling(self):
        """A sampling run starts: `forwards` counts from its first forward again, and the
        second and later runs write new files."""
        self.sampling_runs += 1
        if self.sampling_runs > 1:
            self._start(sampling_run_stem(self.first_stem, self.sampling_runs))

    def forward_begin(self, timestep=None):
        self.forward += 1
        self.active = self.max_forwards == 0 or self.forward <= self.max_forwards
        self._pending = []
        self._timestep = timestep if self.active else None

    def add(self, block, projection, results):
        for seg, info, vec in results:
            self._pending.append(({"forward": self.forward, "block": block,
                                   "projection": projection}, info, vec))

    def forward_end(self):
        if not self.active:
            return []
        self.active = False
        pending, self._pending = self._pending, []
        seen = {m["block"] for m, _, _ in pending}
        for b in sorted(self.blocks - seen):
            _say_once(("silent", b), f"H3 Precision Probe: block {b} recorded nothing (its "
                      "replacement does not call the model's projection modules)")
        if not pending:
            return []
        import torch

        values = torch.stack([v for _, _, v in pending]).cpu().tolist()  # the one sync
        t = self._timestep
        timestep = None
        if t is not None:
            try:
                timestep = float(t.flatten()[0]) if hasattr(t, "flatten") else float(t)
            except Exception:
                timestep = None
        new = []
        for (meta, info, _), vals in zip(pending, values):
            rec = dict(meta, timestep=timestep)
            rec.update(_hp().unpack(info, vals))
            new.append(rec)
        self.records.extend(new)
        self.write(new)
        return new

    def write(self, new=()):
        os.makedirs(self.out_dir, exist_ok=True)
        if new:
            with open(self.jsonl_path, "a") as f:
                for r in new:
                    f.write(json.dumps(r) + "\n")
        with open(self.html_path, "w") as f:
            f.write(render(self.records, title=f"h3stream precision probe: {self.stem}"))


def _for_probe(p):
    """The replacement chain a probed block runs: probe wrappers stay (they measure
    around it), H3 Streamed Blocks gives way to what it would run itself (the replacement
    installed before it, else ComfyUI's own block), anything else runs as it is."""
    if p is None:
        return None
    kind = getattr(p, "h3stream_wrapper", None)
    if kind == "probe":
        return p.rewrap(_for_probe(p.inner))
    if kind == "streamed":
        _say_once(("streamed", id(p.run)), "H3 Precision Probe: probed blocks run ComfyUI's "
                  "own block instead of H3 Streamed Blocks (the projections' inputs exist "
                  "only there); the other blocks stream")
        return _for_probe(p.prev)
    return p


class PrecisionBlock:
    """Replacement of DiT block `index`: on a probed forward, hooks on the block's
    projections around the block's run; otherwise the inner replacement (or ComfyUI's
    block) runs untouched."""

    h3stream_wrapper = "probe"  # a wrapper that measures: H3 Streamed Blocks goes beneath

    def __init__(self, index, recorder, dm_ref, inner=None):
        self.index = index
        self.recorder = recorder
        self.dm_ref = dm_ref
        self.inner = inner

    def rewrap(self, inner):
        return PrecisionBlock(self.index, self.recorder, self.dm_ref, inner)

    def _pass(self, args, extra):
        if self.inner is not None:
            return self.inner(args, extra)
        return extra["original_block"](args)

    def __call__(self, args, extra):
        rec = self.recorder
        dm = self.dm_ref()
        if not rec.active or self.index not in rec.blocks or dm is None:
            return self._pass(args, extra)
        import torch

        block = dm.blocks[self.index]
        segs = args.get("mod_segments")
        max_rows = rec.max_rows
        index = self.index

        rows = args["img"].shape[0]

        def record(name, x, transform=None):
            # A probe never stops sampling: what it cannot measure is logged once.
            if x.shape[0] != rows:  # a replacement calling the projection on row chunks
                _say_once(("chunked", name), f"H3 Precision Probe: block {index} {name} ran "
                          f"on {x.shape[0]} of {rows} rows (a replacement chunks it): not "
                          "measured")
                return
            try:
                with torch.no_grad():
                    rec.add(index, name, _hp().measure(x, segs, max_rows, transform=transform))
            except Exception as e:
                _say_once(("unmeasured", str(e)), f"H3 Precision Probe: block {index} {name} "
                          f"not measured: {type(e).__name__}: {e}")

        def pre(name):
            def hook(module, inputs):
                record(name, inputs[0])
            return hook

        def fc2_from_fc1(module, inputs, output):
            record("mlp.fc2", output, transform=_hp().swiglu)

        handles = []
        try:
            handles.append(block.attn.qkv_proj.register_forward_pre_hook(pre("attn.qkv_proj")))
            handles.append(block.attn.out_proj.register_forward_pre_hook(pre("attn.out_proj")))
            handles.append(block.mlp.fc1.register_forward_pre_hook(pre("mlp.fc1")))
            handles.append(block.mlp.fc1.register_forward_hook(fc2_from_fc1))
            chain = _for_probe(self.inner)
            if chain is not None:
                return chain(args, extra)
            return extra["original_block"](args)
        finally:
            for h in handles:
                h.remove()


def _diffusion_wrapper(recorder):
    def wrapper(executor, x, *args, **kwargs):
        recorder.forward_begin(args[0] if args else kwargs.get("timestep"))
        try:
            return executor(x, *args, **kwargs)
        finally:
            recorder.forward_end()
    return wrapper


def _outer_sample_wrapper(recorder):
    def wrapper(executor, *args, **kwargs):
        recorder.begin_sampling()
        try:
            return executor(*args, **kwargs)
        finally:
            if recorder.records:
                log.info(f"[h3stream] precision probe: {recorder.jsonl_path} and "
                         f"{recorder.html_path}")
    return wrapper


def _check_h3(dm):
    blocks = getattr(dm, "blocks", None)
    if not blocks:
        raise ValueError(f"H3 Precision Probe needs a MiniMax-H3 model, got {type(dm).__name__}")
    b = blocks[0]
    for path in ("attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"):
        obj = b
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"H3 Precision Probe needs a MiniMax-H3 model: block 0 has no "
                             f"{path} ({type(dm).__name__})")


def attach_precision_probe(model, out_dir, stem, blocks="", max_rows=4096, forwards=0):
    """A clone of model (a ComfyUI ModelPatcher) that records the probed blocks'
    activation statistics; returns (clone, recorder)."""
    import comfy.patcher_extension as pe

    dm = model.model.diffusion_model
    _check_h3(dm)
    if int(max_rows) < 1:
        raise ValueError(f"max_rows {max_rows}: at least 1")
    indices = parse_blocks(blocks, len(dm.blocks))
    m = model.clone()
    rec = PrecisionRecorder(out_dir, stem, indices, max_rows, forwards)
    to = m.model_options.setdefault("transformer_options", {})
    replace = to.get("patches_replace", {}).get("dit", {})
    ref = weakref.ref(dm)
    for i in indices:
        inner = replace.get(("double_block", i))
        m.set_model_patch_replace(PrecisionBlock(i, rec, ref, inner), "dit", "double_block", i)
    pe.add_wrapper_with_key(pe.WrappersMP.DIFFUSION_MODEL, WRAPPER_KEY, _diffusion_wrapper(rec),
                            m.model_options, is_model_options=True)
    pe.add_wrapper_with_key(pe.WrappersMP.OUTER_SAMPLE, WRAPPER_KEY, _outer_sample_wrapper(rec),
                            m.model_options, is_model_options=True)
    return m, rec


# -- HTML ---------------------------------------------------------------------------------
FORMAT_LABELS = {"int8": "int8 per row", "int8_convrot": "int8 ConvRot-256",
                 "fp8_e4m3": "fp8 e4m3 per row", "nvfp4": "NVFP4", "nvfp4_h16": "NVFP4 + H16"}
FORMAT_COLORS = {"int8": "#bdbdbd", "int8_convrot": "#2f7ed8", "fp8_e4m3": "#66c2a5",
                 "nvfp4": "#e78ac3", "nvfp4_h16": "#998ec3"}
_LOG_LO, _LOG_HI = -4.0, 0.0  # error axis: 1e-4 .. 1 (log10)


def _fmt(v, spec=".4f"):
    return "-" if v is None else format(v, spec)


def _logpos(v):
    if v is None or v <= 0:
        return 0.0
    return min(max((math.log10(v) - _LOG_LO) / (_LOG_HI - _LOG_LO), 0.0), 1.0)


def _groups(records):
    """{(block, projection, segment): [records over forwards]} in block, projection,
    segment order."""
    out = {}
    proj = {p: i for i, p in enumerate(PROJECTIONS)}
    seg = {s: i for i, s in enumerate(_hp().SEGMENTS)}
    for r in sorted(records, key=lambda r: (r["block"], proj.get(r["projection"], 9),
                                            seg.get(r["segment"], 9), r["forward"])):
        out.setdefault((r["block"], r["projection"], r["segment"]), []).append(r)
    return out


def _worst(rs, key):
    vals = [r.get(key) for r in rs if r.get(key) is not None]
    return max(vals) if vals else None


def _mean(rs, key):
    vals = [r.get(key) for r in rs if r.get(key) is not None]
    return sum(vals) / len(vals) if vals else None


def _chart_svg(records, width=1100, height=260):
    """Per (block, projection): the worst error of each format over segments and forwards,
    log scale."""
    groups = {}
    for (b, p, _), rs in _groups(records).items():
        groups.setdefault((b, p), []).extend(rs)
    if not groups:
        return "<p>No probed forward recorded yet.</p>"
    left, top, bottom = 50, 10, 46
    n = len(groups)
    gw = (width - left - 10) / n
    bw = max(gw / (len(_hp().FORMATS) + 1), 1.0)
    ph = height - top - bottom
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="monospace" font-size="10">']
    for e in range(int(_LOG_LO), int(_LOG_HI) + 1):
        y = top + ph * (1 - (e - _LOG_LO) / (_LOG_HI - _LOG_LO))
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - 10}" y2="{y:.1f}" '
                   f'stroke="#eeeeee"/><text x="{left - 4}" y="{y + 3:.1f}" '
                   f'text-anchor="end">1e{e}</text>')
    for k, ((b, p), rs) in enumerate(groups.items()):
        x0 = left + k * gw
        for j, f in enumerate(_hp().FORMATS):
            v = _worst(rs, f"rel_err_{f}")
            hgt = ph * _logpos(v)
            tip = f"block {b} {p}: {FORMAT_LABELS[f]} worst relative error {_fmt(v)}"
            out.append(f'<rect x="{x0 + (j + 0.5) * bw:.2f}" y="{top + ph - hgt:.2f}" '
                       f'width="{bw * 0.9:.2f}" height="{hgt:.2f}" fill="{FORMAT_COLORS[f]}">'
                       f'<title>{html.escape(tip)}</title></rect>')
        label = f"{b}.{p.split('.')[-1].replace('_proj', '')}"
        out.append(f'<text x="{x0 + gw / 2:.1f}" y="{height - bottom + 12}" '
                   f'text-anchor="middle">{html.escape(label)}</text>')
    x = left
    for f in _hp().FORMATS:
        out.append(f'<rect x="{x}" y="{height - 14}" width="10" height="10" '
                   f'fill="{FORMAT_COLORS[f]}"/><text x="{x + 14}" y="{height - 5}">'
                   f'{html.escape(FORMAT_LABELS[f])}</text>')
        x += 150
    out.append("</svg>")
    return "".join(out)


def _bar(v, f, w=70, h=9):
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">'
            f'<rect x="0" y="0" width="{w}" height="{h}" fill="#f4f4f4"/>'
            f'<rect x="0" y="0" width="{w * _logpos(v):.1f}" height="{h}" '
            f'fill="{FORMAT_COLORS[f]}"/></svg>')


def _table(records):
    head = ["block", "projection", "segment", "forwards", "rows (sampled)", "channels",
            "abs-max", "RMS", "abs-max / RMS", "top outlier channels (abs-max / median)"]
    head += [f"{FORMAT_LABELS[f]} mean / worst" for f in _hp().FORMATS]
    rows = []
    for (b, p, s), rs in _groups(records).items():
        peak = max(rs, key=lambda r: r.get("absmax") or 0.0)
        absmax, rms = _worst(rs, "absmax"), _mean(rs, "rms")
        crest = absmax / rms if absmax is not None and rms else None
        outl = peak.get("outliers") or []
        short = ", ".join(f"{o['channel']} x{_fmt(o['ratio'], '.1f')}" for o in outl[:4])
        full = ", ".join(f"{o['channel']}: {_fmt(o['absmax'], '.4g')} (x{_fmt(o['ratio'], '.2f')})"
                         for o in outl)
        cells = [html.escape(str(c)) for c in (
            b, p, s, len(rs), f"{peak.get('rows')} ({peak.get('sampled_rows')})",
            peak.get("channels"), _fmt(absmax, ".4g"), _fmt(rms, ".4g"), _fmt(crest, ".1f"))]
        cells.append(f'<span title="{html.escape(full)}">{html.escape(short)}</span>')
        for f in _hp().FORMATS:
            mean, worst = _mean(rs, f"rel_err_{f}"), _worst(rs, f"rel_err_{f}")
            cells.append(f"{_fmt(mean)} / {_fmt(worst)} {_bar(worst, f)}")
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
            + "".join(rows) + "</table>")


def render(records, title="h3stream precision probe"):
    """The whole HTML page for these records (dicts as written to the JSONL)."""
    forwards = len({r["forward"] for r in records})
    blocks = sorted({r["block"] for r in records})
    worst = ", ".join(f"{FORMAT_LABELS[f]} {_fmt(_worst(records, f'rel_err_{f}'))}"
                      for f in _hp().FORMATS)
    summary = (f"{forwards} forward(s), blocks {blocks}, {len(records)} records; worst "
               f"relative error: {worst}")
    note = ("Per probed block, projection input and segment (text / audio / video: the "
            "modality the model modulates the rows as, mod_row % 3). Abs-max, RMS and the "
            "outlier channels cover every row; an outlier channel's ratio is its abs-max over "
            "the median channel's abs-max. Errors are ||x - Q(x)|| / ||x|| over at most "
            "max_rows evenly spaced rows per segment, for: int8 per row (absmax / 127); int8 "
            "ConvRot (Hadamard-256 groups, then int8 per row, as comfy-kitchen's int8 ConvRot "
            "linear); fp8 e4m3 per row (absmax / 448); NVFP4 (e2m1 with an e4m3 scale per 16 "
            "elements and a per-tensor scale = absmax of the projection's whole input / 2688); "
            "NVFP4 after a Hadamard-16 rotation of each 16-element block. Bars: log scale "
            "1e-4 .. 1. Table: mean / worst over forwards; outliers of the forward with the "
            "largest abs-max (hover for all eight).")
    return h3_timeline.page(title, summary, note,
                            [("Worst error per block and projection", _chart_svg(records)),
                             ("Per block, projection and segment", _table(records))],
                            records, "precision")


class H3PrecisionProbe:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "model": ("MODEL", {"tooltip": "A MiniMax-H3 model (with or without H3 Streamed "
                                           "Blocks or the Memory Probe)."}),
            "blocks": ("STRING", {
                "default": "",
                "tooltip": "Blocks to probe: empty = every 8th block and the last; 'all'; or "
                           "indices like 0,1,-1 (negative from the end)."}),
            "max_rows": ("INT", {
                "default": 4096, "min": 1, "max": 1 << 20,
                "tooltip": "Rows per segment (evenly spaced) on which the format errors are "
                           "computed; abs-max, RMS and outliers read every row."}),
            "forwards": ("INT", {
                "default": 0, "min": 0, "max": 100000,
                "tooltip": "Probe the first N forwards (0 = every forward)."}),
            "filename_prefix": ("STRING", {
                "default": "h3stream/precision",
                "tooltip": "Under ComfyUI's output folder; a timestamp and .jsonl / .html are "
                           "added."}),
        }}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "probe"
    CATEGORY = "advanced/model/h3stream"
    DESCRIPTION = ("Records, per probed block, projection input (qkv, out, fc1, fc2) and "
                   "segment (text, audio, video): abs-max, RMS, outlier channels and the "
                   "relative error int8, int8 ConvRot, fp8, NVFP4 and NVFP4 after Hadamard "
                   "would add, as JSONL plus a self-contained HTML page. Probed blocks run "
                   "ComfyUI's own block.")

    def probe(self, model, blocks="", max_rows=4096, forwards=0,
              filename_prefix="h3stream/precision"):
        m, _ = attach_precision_probe(model, *output_stem(filename_prefix), blocks=blocks,
                                      max_rows=max_rows, forwards=forwards)
        return (m,)
