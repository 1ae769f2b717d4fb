"""H3 Streamed Blocks: every MiniMax-H3 DiT block through h3stream's exact
three-phase streamed block (K/V build, attention, MLP in row chunks).

The node returns a clone of the model whose DiT blocks are replaced through
transformer_options["patches_replace"]["dit"][("double_block", i)]. A
replacement receives exactly what ComfyUI's DiTBlock.forward receives (x, t_emb,
mod_segments, rope_freqs) and updates x in place like it. Each call takes that
block's weights as ComfyUI hands them to its own modules (comfy_weights.py: cast by
ComfyUI for the call, offloaded weights moved and LoRA patches applied by ComfyUI,
quantised layers as their raw int8/W4A8 data and scales) and runs on them in place:
h3stream holds no copy of the model. The engine (one per model and device, shared by
every node instance) keeps the config only.
"""

import copy
import logging
import numbers
import threading
import time
import weakref

from . import comfy_budget, comfy_weights, h3_controls, h3_native, trim_forward
from .nodes_memory import PROBE_KEY

log = logging.getLogger("h3stream.comfyui")
_said = set()


def say_once(key, line):
    if key not in _said:
        _said.add(key)
        log.warning(f"[h3stream] {line}")


def _interrupted():
    """Raises ComfyUI's InterruptProcessingException when the user interrupted the queue
    (ComfyUI itself checks only between sampler steps)."""
    try:
        import comfy.model_management as mm
    except ImportError:
        return
    check = getattr(mm, "throw_exception_if_processing_interrupted", None)
    if check is not None:
        check()


# -- engines: one per (diffusion model, device); they hold the config only ----
_engines = {}
_engines_lock = threading.Lock()


def drop_engines():
    """Forget every cached engine (and its activation arena). Returns how many."""
    with _engines_lock:
        n = len(_engines)
        _engines.clear()
    return n


class _Run:
    """What the block replacements of one node application share."""

    def __init__(self, h3, model_patcher, values, mode):
        self.h3 = h3
        self.values = values
        self.mode = mode
        self.base_ref = weakref.ref(model_patcher.model)
        opts = h3_controls.engine_options_kwargs(values)
        opts["self_check"] = False  # the node runs self_check itself, once, on block 0
        self.options = h3.Options(**opts)
        self.self_check_pending = bool(values["self_check"])
        self.trim = trim_forward.EmbedHolder() if values["trim_forward"] else None
        self._rope_src = None  # weakref to the rope_freqs tensor the cached table came from
        self._rope = None
        self._segs_src = None  # the mod_segments list the cached runs came from
        self._runs = None
        # vram_budget 0 inside ComfyUI: each call's budget is what ComfyUI can give then
        # (comfy_budget.py), not the engine's free-memory rule.
        self.budget_auto = values["vram_budget"] == 0
        self.last_budget = None
        self._block_bytes = {}
        self.progress = _Progress()

    def call_options(self, index, block, x):
        """The engine options of one block call: with vram_budget 0 on a GPU, the budget is
        what ComfyUI can give h3stream at this call, less the block's own weights."""
        if not (self.budget_auto and x.is_cuda):
            return self.options
        held = self._block_bytes.get(index)
        if held is None:
            held = self._block_bytes[index] = comfy_budget.module_bytes(block)
        budget, parts = comfy_budget.device_budget(x.device, held)
        self.last_budget = parts
        opts = copy.copy(self.options)
        opts.vram_budget = max(budget, 1)  # 0 would mean "the engine's own rule"
        return opts

    def refusal(self, index, x, err):
        """The message of a block call h3stream cannot fit: the engine's reason, what ComfyUI
        could give, and the controls that change it."""
        given = (f" ComfyUI can give h3stream {comfy_budget.describe(self.last_budget)}."
                 f"{comfy_budget.allocator_hint(self.last_budget)}"
                 if self.last_budget else "")
        return (f"H3 Streamed Blocks cannot run block {index} at {x.shape[0]} tokens on {x.device}: "
                f"{err}.{given} To fit: close other GPU work, give vram_budget (MiB) explicitly, "
                "choose kv_store kvi8s (about half the K/V memory, approximate), lower q_chunk / "
                "kv_chunk / mlp_chunk, or set kv_placement host (exact: the K/V in pinned host "
                "memory, slower by the bus traffic).")

    @property
    def base(self):
        base = self.base_ref()
        if base is None:
            raise RuntimeError("h3stream: the model this node patched no longer exists")
        return base

    def engine_for(self, x):
        """(engine, None) or (None, why) for a block input x."""
        dev = x.device
        if dev.type == "cuda":
            if not self.h3.has_cuda():
                return None, ("this h3stream build has no CUDA backend (or sees no GPU), the "
                              "model runs on CUDA")
            backend, index = "cuda", dev.index if dev.index is not None else 0
        elif dev.type == "cpu":
            backend, index = "cpu", 0
        else:
            return None, f"device {dev} is not supported (cpu or cuda)"
        dm = self.base.diffusion_model
        key = (id(dm), backend, index)
        with _engines_lock:
            hit = _engines.get(key)
            if hit is not None and hit[0]() is dm:
                return hit[1], None
        try:
            # The config only (every name and shape checked, no tensor kept): each call
            # brings its block's weights as ComfyUI casts them (comfy_weights.py).
            engine = self.h3.Engine.from_tensors(_config_state_dict(dm), backend=backend,
                                                 device=index, lazy_blocks=True)
        except Exception as e:
            return None, f"h3stream cannot take this model's weights: {type(e).__name__}: {e}"
        with _engines_lock:
            for k in [k for k, (ref, _) in _engines.items() if k[0] == id(dm) or ref() is None]:
                del _engines[k]  # an older weights version of this model, or a freed model
            _engines[key] = (weakref.ref(dm), engine)
        return engine, None

    def rope(self, rope_freqs):
        """h3stream's (cos, sin) table; computed once per forward (ComfyUI builds one
        rope_freqs tensor per forward and hands the same object to every block)."""
        if self._rope_src is None or self._rope_src() is not rope_freqs:
            self._rope = self.h3.rope_from_comfy(rope_freqs)
            self._rope_src = weakref.ref(rope_freqs)
        return self._rope

    def mod_runs(self, mod_segments):
        """h3stream's (begin, end, mod_row) int runs of ComfyUI's mod_segments (a partial
        denoise mask gives per-token rows: split into runs of equal rows, the same bits);
        computed once per forward (the same list reaches every block). Raises TypeError
        or ValueError for rows h3stream cannot take (e.g. a blend of rows)."""
        if self._segs_src is not mod_segments:
            self._runs = self.h3.mod_runs(mod_segments)
            self._segs_src = mod_segments
        return self._runs


class _Progress:
    """The block 0 line of each forward (tokens, blocks, placement, budget), then one line per
    block on long steps (a block of LONG_BLOCK_S or more) and the last block's line: a 50-block
    step of minutes is never silent, a short one does not flood the console."""

    LONG_BLOCK_S = 1.0

    def __init__(self):
        self.t_prev = None

    def block_start(self, index):
        if index == 0 or self.t_prev is None:
            self.t_prev = time.perf_counter()

    def block_done(self, index, blocks, tokens, what=None):
        """Returns the line logged, or None."""
        now = time.perf_counter()
        elapsed, self.t_prev = now - self.t_prev, now
        line = None
        if index == 0:
            line = f"[h3stream] {tokens} tokens, {blocks} blocks: block 1 in {elapsed:.1f} s; {what}"
        elif elapsed >= self.LONG_BLOCK_S or index == blocks - 1:
            line = f"[h3stream] block {index + 1}/{blocks} done in {elapsed:.1f} s"
        if line:
            log.info(line)
        return line


def _config_state_dict(dm):
    """The model's tensors as the engine's config reads them. A PDD head bank (upstream
    ComfyUI: several output heads per stream, rows [n * features, hidden]) gives its first
    head: the engine runs blocks only, and the model's own final layer blends the bank."""
    sd = dm.state_dict()
    for name in ("video_out", "audio_out"):
        head = getattr(dm.final_layer, name, None)
        rows = getattr(head, "out_features", None)
        for part in ("weight", "bias"):
            key = f"final_layer.{name}.{part}"
            t = sd.get(key)
            if rows and t is not None and t.dim() >= 1 and t.shape[0] > rows:
                sd[key] = t[:rows]
    return sd


def _unsupported_block(block):
    """Why ComfyUI must run this block itself, or None (on-the-fly weight patches are
    supported: ComfyUI's own cast applies them, comfy_weights.py)."""
    return comfy_weights.unsupported(block)


def comfy_mlp_half(block, x, t_emb, mod_segments):
    """The second half of ComfyUI's DiTBlock.forward, with the model's own modules:
    x += gate_mlp * mlp(modulate(norm2(x)))."""
    from comfy.ldm.minimax.model import _mod_gate, _mod_scale_shift

    _sm, _cm, _gm, shift_mlp, scale_mlp, gate_mlp = block.adaln_proj(t_emb)
    h = _mod_scale_shift(block.norm2(x), shift_mlp, scale_mlp, mod_segments)
    return _mod_gate(x, gate_mlp, block.mlp(h), mod_segments)


class StreamedBlock:
    """The replacement of DiT block `index` (a ComfyUI patches_replace callable)."""

    h3stream_wrapper = "streamed"

    def __init__(self, index, run, prev=None):
        self.index = index
        self.run = run
        self.prev = prev  # a replacement installed before this node (runs when we do not)
        self.last_path = "comfy"

    def _stock(self, args, extra):
        self.last_path = "comfy"
        if self.prev is not None:
            return self.prev(args, extra)
        return extra["original_block"](args)

    def __call__(self, args, extra):
        _interrupted()  # ComfyUI's interrupt, honoured between blocks (a step can be minutes)
        x = args["img"]
        if x.dim() == 3:
            return self._rows(args, extra)
        run = self.run
        if self.index == 0 and run.trim is not None:
            run.trim.release()  # h holds the packed rows: the patch embeds are dead
        if x.shape[0] < run.values["min_tokens"]:
            return self._stock(args, extra)
        import torch

        if x.dtype != torch.bfloat16 or not x.is_contiguous() or x.dim() != 2:
            say_once(("dtype", str(x.dtype)),
                     f"block input is {x.dtype} {list(x.shape)} (contiguous {x.is_contiguous()}); "
                     "h3stream runs bf16 [S, hidden] only: ComfyUI's own blocks run instead")
            return self._stock(args, extra)
        block = run.base.diffusion_model.blocks[self.index]
        why = _unsupported_block(block)
        if why:
            say_once(("block", why), f"block {self.index}: {why}: ComfyUI's own block runs instead")
            return self._stock(args, extra)
        engine, why = run.engine_for(x)
        if engine is None:
            say_once(("engine", why), f"{why}: ComfyUI's own blocks run instead")
            return self._stock(args, extra)
        t_emb, segs = args["t_emb"], args["mod_segments"]
        try:
            runs = run.mod_runs(segs)
        except (TypeError, ValueError) as e:
            say_once(("mod_rows", str(e)), f"block modulation rows: {e}; ComfyUI's own blocks "
                     "run instead")
            return self._stock(args, extra)
        if self.prev is not None:
            name = getattr(self.prev, "__qualname__", type(self.prev).__qualname__)
            say_once(("prev",), f"a block replacement installed before H3 Streamed Blocks "
                     f"({name}, e.g. a sparse-attention node) runs only below min_tokens and "
                     "where h3stream falls back; at or above min_tokens h3stream runs the "
                     "blocks, with dense attention")
        rope = run.rope(args["rope_freqs"])
        if run.self_check_pending and self.index == 0:
            run.self_check_pending = False
            self._self_check(engine, args, extra, runs, rope)
        to = args.get("transformer_options") or {}
        probe = to.get(PROBE_KEY) if isinstance(to, dict) else None
        if probe is not None:
            engine.reset_ledger()
        run.progress.block_start(self.index)
        x = self._run(engine, block, x, t_emb, segs, runs, rope)
        if x is None:
            return self._stock(args, extra)
        blocks = len(run.base.diffusion_model.blocks)
        if self.index == 0:
            placement = getattr(engine, "last_placement", None) or "?"  # the planner's line
            budget = (f"; budget {comfy_budget.describe(run.last_budget)}"
                      if run.last_budget else "")
            slab = getattr(engine, "weight_bytes", 0) or 0
            if slab:  # the per-call weight slab h3stream keeps between calls
                budget += f"; h3stream's weight slab {slab / comfy_budget.GIB:.2f} GiB"
            run.progress.block_done(0, blocks, x.shape[0], f"{placement}{budget}")
        else:
            run.progress.block_done(self.index, blocks, x.shape[0], None)
        if probe is not None:
            probe.engine_phases(self.index, engine.ledger(),
                                getattr(engine, "last_placement_info", None))
        self.last_path = "h3stream"
        return {"img": x}

    def _rows(self, args, extra):
        """A batch [B, S, hidden] (cond and uncond batched, cfg > 1): each row through the
        engine in place, as the same call with that row (t_emb per row when it has a batch
        dimension, the segments and RoPE shared); a row h3stream cannot take runs ComfyUI's
        block on that row alone."""
        x = args["img"]
        t_emb = args["t_emb"]
        per_row_t = t_emb.dim() == 3 and t_emb.shape[0] == x.shape[0]
        paths = []
        for b in range(x.shape[0]):
            row_args = dict(args, img=x[b], t_emb=t_emb[b] if per_row_t else t_emb)
            y = self(row_args, extra)["img"]
            if y.data_ptr() != x[b].data_ptr():
                x[b].copy_(y)
            paths.append(self.last_path)
        self.last_path = "h3stream" if all(p == "h3stream" for p in paths) else "comfy"
        return {"img": x}

    def _run(self, engine, block, x, t_emb, segs, runs, rope):
        """The block on x in place: h3stream with `runs` (mod_segments as int runs), or,
        with mlp_chunk 0, h3stream's attention half and ComfyUI's MLP half with `segs`."""
        run = self.run
        attn_only = run.values["mlp_chunk"] == 0
        options = run.call_options(self.index, block, x)
        with comfy_weights.block_weights(block, self.index, x, mlp=not attn_only) as weights:
            try:
                if attn_only:
                    try:
                        engine.run_block(self.index, x, t_emb, runs, rope, mode=run.mode,
                                         options=options, phases="attn", weights=weights)
                    except NotImplementedError as e:
                        say_once(("attn-only",), f"mlp_chunk 0 needs the attention-only phase: "
                                 f"{e}; ComfyUI's own blocks run instead")
                        return None
                else:
                    engine.run_block(self.index, x, t_emb, runs, rope, mode=run.mode,
                                     options=options, weights=weights)
            except MemoryError as e:
                # The engine plans before any work of the block: nothing ran, nothing changed.
                raise MemoryError(run.refusal(self.index, x, e)) from None
        return comfy_mlp_half(block, x, t_emb, segs) if attn_only else x

    def _self_check(self, engine, args, extra, runs, rope):
        """One line: h3stream streamed vs h3stream stock (variants), and h3stream vs
        ComfyUI's own block, on block 0's input."""
        from .h3_compare import describe, rel_rms, ulp_diff

        run = self.run
        x = args["img"]
        t_emb, segs = args["t_emb"], args["mod_segments"]
        try:
            block = run.base.diffusion_model.blocks[self.index]
            with comfy_weights.block_weights(block, self.index, x) as weights:
                ours = engine.self_check(self.index, x, t_emb, runs, rope, options=run.options,
                                         weights=weights)
            mine = x.clone()
            mine = self._run(engine, block, mine, t_emb, segs, runs, rope)
            ref_args = dict(args)
            ref_args["img"] = x.clone()
            ref = extra["original_block"](ref_args)["img"]
            if mine is None:
                vs = "n/a (attention-only phase unavailable)"
            else:
                d = ulp_diff(mine, ref)
                d["rel_rms"] = rel_rms(mine, ref)
                vs = describe(d)
            del mine, ref, ref_args
            variants = ", ".join(f"{v['name']} {v.get('differing', '?')} differ / max "
                                 f"{v['max_ulp']} mean {v.get('mean_ulp', 0.0):.3g} ulp"
                                 for v in ours.get("variants", []))
            verdict = "bit-equal" if ours.get("all_equal") else "DIFFERENT"
            # An approximate tier is never called exact: its error against the exact
            # store, or the note that the exact store ran in its place.
            tier = ours.get("tier")
            store = (f"; kv_store {tier['kv_store']} (APPROXIMATE) vs the exact store: rel-rms "
                     f"{tier['rel_rms']:.3g}, max |d| {tier['max_abs']:.3g}" if tier else "")
            if ours.get("tier_fallback"):
                store += (f"; kv_store {ours['tier_fallback']} has no kernel on this backend: "
                          "the exact store ran")
            log.warning(f"[h3stream] self_check block 0, {x.shape[0]} tokens, {engine.backend}, "
                        f"{engine.config.get('format')}: streamed vs h3stream stock {verdict} "
                        f"(by variant: {variants}){store}; h3stream vs ComfyUI block: {vs}")
        except Exception as e:  # a check must never stop sampling
            log.warning(f"[h3stream] self_check block 0 failed: {type(e).__name__}: {e}")


# -- final layer chunking -------------------------------------------------------
class ChunkedFinalLayer:
    """Replaces FinalLayer.forward (an object patch on the instance attribute, so
    the module tree and its state_dict are untouched): the model's own norm,
    adaLN and heads, run over row chunks of the video and audio spans."""

    def __init__(self, layer, chunk, gemm, merge_tail_below=512, self_check=False):
        self.layer_ref = weakref.ref(layer)
        self.chunk = int(chunk)
        self.gemm = gemm
        self.merge_tail_below = int(merge_tail_below)
        # self_check: the first call that chunks is also run through the layer's own
        # forward and compared (one line): whether this GPU's cuBLAS gives the chunked
        # head the whole span's bits is measured, not assumed.
        self.self_check_pending = bool(self_check)

    def row_chunks(self, n):
        """[lo, hi) chunks of `chunk` rows over n; a tail shorter than merge_tail_below
        joins the previous chunk (docs/FEATURES.md "Chunk planning", as h3stream's
        ChunkPlan)."""
        bounds = list(range(0, n, self.chunk)) + [n]
        if len(bounds) > 2 and bounds[-1] - bounds[-2] < self.merge_tail_below:
            del bounds[-2]
        return list(zip(bounds[:-1], bounds[1:]))

    def gemm_windows(self, n):
        """(lo, hi, w): the streamed head GEMM's calls over n > chunk rows, each on the
        `chunk` rows [w, w + chunk) and keeping its rows [lo, hi). The last window ends
        at n and overlaps the one before it, so every call has the same M: cuBLAS picks
        its kernel by M (split-K for a short tail: ~2.5e-6 off, measured on the H100), and
        one shape gives every row the same kernel wherever the chunks fall."""
        c = self.chunk
        return [(lo, min(lo + c, n), min(lo, n - c)) for lo in range(0, n, c)]

    @staticmethod
    def _unchunkable(fl, *segs):
        """Why this call must run the layer's own forward, or None. ComfyUI versions
        differ: a PDD head bank (several heads per stream, blended by the sampler's
        sigma: upstream ComfyUI) or per-token modulation rows (a partial denoise mask)
        are the model's own arithmetic, which the chunks here do not restate."""
        out = fl.video_out
        per_head = getattr(out, "out_features", None)
        if per_head and out.weight.shape[0] // per_head > 1:
            return "the output heads are a PDD head bank"
        for seg in segs:
            row = seg[2]
            if not (isinstance(row, numbers.Integral) or (hasattr(row, "dim") and row.dim() == 0)):
                return "the output spans have per-token modulation rows (a partial denoise mask)"
        return None

    def __call__(self, x, t_emb, video_seg, audio_seg, *rest, **kwargs):
        """FinalLayer.forward's call: (x, t_emb, video_seg, audio_seg), plus upstream
        ComfyUI's (sigma, sample_sigmas, shifts), which only a PDD head bank reads."""
        fl = self.layer_ref()
        why = self._unchunkable(fl, video_seg, audio_seg)
        if why:
            say_once(("final_layer", why), f"final_layer_chunk: {why}: ComfyUI's final layer "
                     "runs unchunked")
            return type(fl).forward(fl, x, t_emb, video_seg, audio_seg, *rest, **kwargs)
        shift, scale = fl.adaln_proj(t_emb)
        out = (self._span(fl, fl.video_out, x, video_seg, shift, scale),
               self._span(fl, fl.audio_out, x, audio_seg, shift, scale))
        chunks = any(seg[1] - seg[0] > self.chunk for seg in (video_seg, audio_seg))
        if self.self_check_pending and chunks:
            self.self_check_pending = False
            self._self_check(fl, out, (x, t_emb, video_seg, audio_seg, *rest), kwargs)
        return out

    def _self_check(self, fl, out, args, kwargs):
        """One line: these chunks against the layer's own forward, per span."""
        from .h3_compare import describe, rel_rms, ulp_diff

        try:
            ref = type(fl).forward(fl, *args, **kwargs)
            parts, equal = [], True
            for name, got, want in zip(("video", "audio"), out, ref):
                d = ulp_diff(got, want)  # raises on a shape or dtype mismatch
                d["rel_rms"] = rel_rms(got, want)
                equal = equal and d["bit_equal"]
                rows = "" if d["bit_equal"] else f" ({int((got != want).any(dim=-1).sum())} rows)"
                parts.append(f"{name} {describe(d)}{rows}")
            verdict = "bit-equal" if equal else "DIFFERENT"
            log.warning(f"[h3stream] self_check final layer: final_layer_chunk {self.chunk}, "
                        f"final_layer_gemm {self.gemm} vs the model's own final layer "
                        f"{verdict}: {'; '.join(parts)}")
        except Exception as e:  # a check must never stop sampling
            log.warning(f"[h3stream] self_check final layer failed: {type(e).__name__}: {e}")

    def _span(self, fl, head, x, seg, shift, scale):
        import torch

        a, b, row = seg
        n = b - a
        one_plus = 1.0 + scale[row]  # the stock expression, same operand order
        sh = shift[row]

        def modulated(lo, hi):
            return fl.norm(x[a + lo:a + hi]) * one_plus + sh

        if n <= self.chunk:
            return head(modulated(0, n).to(torch.float32))
        if self.gemm == "exact":  # fp32 span built chunk by chunk, then the stock GEMM
            buf = torch.empty(n, x.shape[1], dtype=torch.float32, device=x.device)
            for lo, hi in self.row_chunks(n):
                buf[lo:hi] = modulated(lo, hi)
            return head(buf)
        out = None
        for lo, hi, w in self.gemm_windows(n):
            y = head(modulated(w, w + self.chunk).to(torch.float32))
            if out is None:
                out = torch.empty(n, y.shape[1], dtype=y.dtype, device=y.device)
            out[lo:hi] = y[lo - w:hi - w]
        return out


def _is_h3(dm):
    return all(hasattr(dm, a) for a in ("blocks", "final_layer", "video_patch_proj",
                                        "audio_patch_proj", "rope"))


def _under_probes(prev, make):
    """make(p) placed beneath every probe wrapper (Memory Probe, Precision Probe) at the
    top of the replacement chain prev, so the probes stay outermost in any order."""
    if getattr(prev, "h3stream_wrapper", None) == "probe":
        return prev.rewrap(_under_probes(prev.inner, make))
    return make(prev)


def _check_kvmix_heads(values, dm):
    """kvmix's head controls against the model's heads, when the node is applied (the
    engine checks them too, but only at block 0's first call, with sampling under way)."""
    heads = getattr(getattr(dm.blocks[0], "attn", None), "heads", None) if len(dm.blocks) else None
    if values["kv_store"] != "kvmix" or not isinstance(heads, int):
        return
    count = values["kv_mix_count"]
    if count > heads:
        raise ValueError(f"kv_mix_count = {count} is more than the model's {heads} heads: give "
                         f"at most {heads} (or 0 for half)")
    for h in h3_controls.parse_head_list("kv_mix_heads", values["kv_mix_heads"]):
        if h >= heads:
            raise ValueError(f"kv_mix_heads: head {h} is not a head of this model (it has heads "
                             f"0..{heads - 1})")


def apply_streamed(model, values, mode="streamed", h3=None):
    """A clone of `model` (a ComfyUI ModelPatcher) with every DiT block streamed.
    mode="stock" runs h3stream's stock block instead (for the end-to-end check)."""
    if h3 is None:
        h3, why = h3_native.load()
        if h3 is None:
            raise RuntimeError(f"h3stream native module unavailable: {why}")
    values = h3_controls.checked(values)
    if mode not in ("streamed", "stock"):
        raise ValueError(f"mode {mode!r}: use 'streamed' or 'stock'")
    dm = model.model.diffusion_model
    if not _is_h3(dm):
        raise ValueError(f"H3 Streamed Blocks needs a MiniMax-H3 model, got {type(dm).__name__}")
    _check_kvmix_heads(values, dm)
    m = model.clone()
    run = _Run(h3, m, values, mode)
    to = m.model_options.setdefault("transformer_options", {})
    replace = to.get("patches_replace", {}).get("dit", {})
    for i in range(len(dm.blocks)):
        prev = replace.get(("double_block", i))
        patch = _under_probes(prev, lambda p, i=i: StreamedBlock(i, run, p))
        m.set_model_patch_replace(patch, "dit", "double_block", i)
    if run.trim is not None:
        trim_forward.apply(m, dm, run.trim)
    if values["final_layer_chunk"] > 0:
        m.add_object_patch("diffusion_model.final_layer.forward",
                           ChunkedFinalLayer(dm.final_layer, values["final_layer_chunk"],
                                             values["final_layer_gemm"],
                                             self_check=values["self_check"]))
    return m


class H3StreamedBlocks:
    @classmethod
    def INPUT_TYPES(cls):
        # The model is the only required input (docs/FEATURES.md "Controls"): a control a
        # workflow does not give takes its default, so saved workflows keep loading as
        # controls are added.
        req = {"model": ("MODEL", {"tooltip": "A MiniMax-H3 model (bf16, int8 ConvRot or W4A8 "
                                              "checkpoint). The node returns a patched clone."})}
        return {"required": req,
                "optional": {c.name: c.comfy_input() for c in h3_controls.CONTROLS}}

    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"
    CATEGORY = "advanced/model/h3stream"
    DESCRIPTION = ("Runs every MiniMax-H3 DiT block through h3stream's streamed block: K/V "
                   "build, attention and MLP in row chunks, bit-identical to h3stream's stock "
                   "(whole-sequence) block at any chunk size, with a fraction of the memory. "
                   "Short sequences (below min_tokens) use ComfyUI's block.")

    def patch(self, model, **controls):
        return (apply_streamed(model, controls),)
