"""H3 Memory Probe: per forward, per block and per phase memory ledger as JSONL
plus a self-contained HTML timeline, without device syncs during sampling.

Mechanism: a DIFFUSION_MODEL wrapper marks each forward (embed before block 0,
final after the last block) and a block wrapper around whatever replaces each
DiT block (H3 Streamed Blocks, another node, or ComfyUI's block) marks blocks.
Device numbers are the PyTorch caching allocator's host-side counters; times are
CUDA events recorded on the current stream and read back later (event.query(),
never a wait) plus host clocks. When H3 Streamed Blocks runs a block it hands
the h3stream arena's kv / attn / mlp ledger to the probe (key
"h3stream_probe" in transformer_options).
"""

import datetime
import json
import logging
import os
import threading
import time

from . import h3_timeline

log = logging.getLogger("h3stream.comfyui")
PROBE_KEY = "h3stream_probe"
WRAPPER_KEY = "h3stream_memory_probe"


def _host_rss():
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except Exception:
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except Exception:
            return None


class _Mark:
    """Where a step began: host clock, CUDA event, allocator state."""

    def __init__(self, rec, device):
        self.host = time.perf_counter()
        self.event = None
        self.device = device
        torch = rec.torch
        if device is not None and device.type == "cuda":
            self.event = torch.cuda.Event(enable_timing=True)
            self.event.record(torch.cuda.current_stream(device))
            torch.cuda.reset_peak_memory_stats(device)  # host-side bookkeeping, no sync


class Recorder:
    """Collects ledger records; flush() writes the ones whose events completed."""

    def __init__(self, out_dir, stem, torch_module=None):
        if torch_module is None:
            import torch as torch_module
        self.torch = torch_module
        self.out_dir = out_dir
        self.stem = stem
        self.first_stem = stem
        self.sampling_runs = 0
        self._lock = threading.Lock()
        self._start(stem)

    def _start(self, stem):
        self.stem = stem
        self.jsonl_path = os.path.join(self.out_dir, stem + ".jsonl")
        self.html_path = os.path.join(self.out_dir, stem + ".html")
        self.records = []   # every record, resolved or not
        self.pending = []   # (record, start event, end event, forward start event)
        self.written = 0
        self.forward = 0
        self.t0 = time.perf_counter()
        self._fwd_event = None
        self._fwd_mark = None
        self._last = None

    def begin_sampling(self):
        """A sampling run starts: the second and later runs write new files."""
        self.sampling_runs += 1
        if self.sampling_runs > 1:
            self._start(sampling_run_stem(self.first_stem, self.sampling_runs))

    # -- marks -------------------------------------------------------------
    def _device_of(self, x):
        d = getattr(x, "device", None)
        return d if d is not None and d.type == "cuda" else None

    def _close(self, mark, phase, **fields):
        torch = self.torch
        r = {"forward": self.forward, "phase": phase,
             "host_start_ms": (mark.host - self.t0) * 1e3,
             "host_ms": (time.perf_counter() - mark.host) * 1e3,
             "gpu_start_ms": None, "gpu_ms": None,
             "allocated": None, "peak": None, "reserved": None, "host_rss": _host_rss()}
        r.update(fields)
        end = None
        if mark.device is not None:
            d = mark.device
            r["allocated"] = int(torch.cuda.memory_allocated(d))
            r["peak"] = int(torch.cuda.max_memory_allocated(d))
            r["reserved"] = int(torch.cuda.memory_reserved(d))
            end = torch.cuda.Event(enable_timing=True)
            end.record(torch.cuda.current_stream(d))
        with self._lock:
            self.records.append(r)
            if end is not None:
                self.pending.append((r, mark.event, end, self._fwd_event))
        return r

    def forward_begin(self, device):
        self.forward += 1
        self._fwd_mark = _Mark(self, device)
        self._fwd_event = self._fwd_mark.event
        self._last = self._fwd_mark  # the embed span runs until block 0 starts
        self._last_phase = "embed"
        self._tokens = None

    def block_begin(self, index, x):
        if self._last is not None and self._last_phase == "embed":
            self._close(self._last, "embed", block=None, tokens=int(x.shape[0]))
        self._tokens = int(x.shape[0])
        return _Mark(self, self._device_of(x))

    def block_end(self, mark, index, x, path):
        self._close(mark, "block", block=index, tokens=int(x.shape[0]), path=path)
        self._last = _Mark(self, mark.device)
        self._last_phase = "final"

    def engine_phases(self, index, ledger, placement=None):
        """The h3stream arena's (block, phase) entries of one block run, with the
        placement planner's predicted peak of each phase and the K/V placement and
        bytes staged (Engine.last_placement_info) when given."""
        predicted = (placement or {}).get("predicted_peaks", {})
        rss = _host_rss()  # after the block: the phases ran inside it
        for e in ledger:
            if e.get("phase") not in ("kv", "attn", "mlp"):
                continue
            rec = {"forward": self.forward, "phase": e["phase"], "block": index,
                   "path": "h3stream", "arena_allocated_at_start": e.get("allocated_at_start"),
                   "arena_allocated": e.get("allocated"), "arena_peak": e.get("peak"),
                   "arena_reserved": e.get("reserved"),
                   "arena_predicted": predicted.get(e["phase"]), "host_rss": rss}
            if placement is not None:
                rec.update(kv_placement=placement.get("kv"),
                           staged_to_host=placement.get("staged_to_host_bytes"),
                           staged_to_device=placement.get("staged_to_device_bytes"),
                           copy_s=placement.get("copy_seconds"),
                           exposed_copy_s=placement.get("exposed_copy_seconds"))
            with self._lock:
                self.records.append(rec)

    def forward_end(self):
        if self._last is not None and self._last_phase == "final":
            self._close(self._last, "final", block=None, tokens=self._tokens)
        if self._fwd_mark is not None:
            self._close(self._fwd_mark, "forward", block=None, tokens=self._tokens)
        self._last = None
        self.flush()

    # -- output ------------------------------------------------------------
    def _resolve(self, wait):
        keep = []
        for r, start, end, fwd in self.pending:
            if wait:
                end.synchronize()
            elif not end.query():
                keep.append((r, start, end, fwd))
                continue
            r["gpu_ms"] = start.elapsed_time(end) if start is not None else None
            r["gpu_start_ms"] = fwd.elapsed_time(start) if fwd is not None and start is not None else None
        self.pending = keep

    def flush(self, wait=False):
        """Write every record up to the first one still waiting for its GPU events.
        wait=True waits for those events (only call it after sampling has finished)."""
        with self._lock:
            self._resolve(wait)
            waiting = {id(p[0]) for p in self.pending}
            n = self.written
            while n < len(self.records) and id(self.records[n]) not in waiting:
                n += 1
            new = self.records[self.written:n]
            os.makedirs(self.out_dir, exist_ok=True)
            if new:
                with open(self.jsonl_path, "a") as f:
                    for r in new:
                        f.write(json.dumps(r) + "\n")
                self.written = n
            done = self.records[:self.written]
        with open(self.html_path, "w") as f:
            f.write(h3_timeline.render(done, title=f"h3stream memory ledger: {self.stem}"))
        return new


class ProbeBlock:
    """Block wrapper: marks the block around the inner replacement (or ComfyUI's block)."""

    h3stream_wrapper = "probe"

    def __init__(self, index, recorder, inner=None):
        self.index = index
        self.recorder = recorder
        self.inner = inner

    def rewrap(self, inner):
        return ProbeBlock(self.index, self.recorder, inner)

    def __call__(self, args, extra):
        x = args["img"]
        mark = self.recorder.block_begin(self.index, x)
        to = args.get("transformer_options")
        if isinstance(to, dict):
            to[PROBE_KEY] = self.recorder
        if self.inner is not None:
            out = self.inner(args, extra)
            path = getattr(self.inner, "last_path", "comfy")
        else:
            out = extra["original_block"](args)
            path = "comfy"
        self.recorder.block_end(mark, self.index, out["img"], path)
        return out


def _diffusion_wrapper(recorder):
    def wrapper(executor, x, *args, **kwargs):
        first = x[0] if isinstance(x, (list, tuple)) else x
        dev = getattr(first, "device", None)
        recorder.forward_begin(dev if dev is not None and dev.type == "cuda" else None)
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
            recorder.flush(wait=True)  # sampling is over: wait for the last events once
            log.info(f"[h3stream] memory ledger: {recorder.jsonl_path} and {recorder.html_path}")
    return wrapper


def attach_probe(model, out_dir, stem):
    """A clone of model (a ComfyUI ModelPatcher) that records the ledger; returns
    (clone, recorder)."""
    import comfy.patcher_extension as pe

    dm = model.model.diffusion_model
    m = model.clone()
    rec = Recorder(out_dir, stem)
    to = m.model_options.setdefault("transformer_options", {})
    replace = to.get("patches_replace", {}).get("dit", {})
    for i in range(len(dm.blocks)):
        inner = replace.get(("double_block", i))
        m.set_model_patch_replace(ProbeBlock(i, rec, inner), "dit", "double_block", i)
    pe.add_wrapper_with_key(pe.WrappersMP.DIFFUSION_MODEL, WRAPPER_KEY, _diffusion_wrapper(rec),
                            m.model_options, is_model_options=True)
    pe.add_wrapper_with_key(pe.WrappersMP.OUTER_SAMPLE, WRAPPER_KEY, _outer_sample_wrapper(rec),
                            m.model_options, is_model_options=True)
    return m, rec


def _output_dir():
    try:
        import folder_paths

        return folder_paths.get_output_directory()
    except Exception:
        return os.getcwd()


def output_stem(filename_prefix):
    """(folder, stem) of a probe's files: filename_prefix under ComfyUI's output folder
    plus a timestamp. A prefix that leaves the output folder (an absolute path, '..') is
    refused, as ComfyUI's own save nodes refuse it."""
    out = os.path.realpath(_output_dir())
    base = os.path.realpath(os.path.join(out, filename_prefix))
    if os.path.commonpath([out, base]) != out or base == out:
        raise ValueError(f"filename_prefix {filename_prefix!r} is not a file name under "
                         f"ComfyUI's output folder ({out}): give one like 'h3stream/probe'")
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.dirname(base), f"{os.path.basename(base)}_{stamp}"


def sampling_run_stem(stem, run):
    """The stem of a probe's files for sampling run `run` (1: the node's own stem): a
    workflow queued again reuses the node's cached model, and its files start over."""
    return stem if run <= 1 else f"{stem}-run{run}"


class H3MemoryProbe:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "model": ("MODEL", {"tooltip": "A MiniMax-H3 model (with or without H3 Streamed Blocks)."}),
            "filename_prefix": ("STRING", {
                "default": "h3stream/memory",
                "tooltip": "Under ComfyUI's output folder; a timestamp and .jsonl / .html are added."}),
        }}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "probe"
    CATEGORY = "advanced/model/h3stream"
    DESCRIPTION = ("Records, per forward, per block and per phase (embed, blocks, h3stream "
                   "kv / attn / mlp, final): device memory allocated, peak, reserved, host RSS "
                   "and GPU time, as JSONL plus a self-contained HTML timeline. No device sync "
                   "while sampling.")

    def probe(self, model, filename_prefix="h3stream/memory"):
        m, rec = attach_probe(model, *output_stem(filename_prefix))
        return (m,)
