#!/usr/bin/env python3
"""The node's weight hand-over in a real ComfyUI, measured (issue 10; docs/COMFYUI.md).

A full-width H3 checkpoint (hidden 5376, --blocks DiT blocks, written by
h3stream.make_checkpoint) loaded by ComfyUI's own loader, with its weights where one of
ComfyUI's memory modes puts them (--offload; ComfyUI's flags are per process, so one mode per
run):

  none     resident on the GPU (ComfyUI's classic ModelPatcher)
  legacy   --novram --disable-dynamic-vram: every module's weight stays in host memory and
           moves through ComfyUI's pinned buffers and offload stream at its cast
  dynamic  ComfyUI's dynamic VRAM (comfy-aimdo, set up as main.py sets it up) with a
           --vram-headroom above the device's memory: aimdo keeps no weight page in VRAM, so
           every cast streams its weight from pinned host memory through aimdo's cast buffer

What is measured (--measure), one JSON object per record appended to --out/weights-bench.jsonl:

  speed     at each token count: ComfyUI's own blocks (mode "comfy"), "H3 Streamed Blocks"
            with its defaults ("node") and h3stream's resident engine ("resident":
            Engine.from_checkpoint on the same file, its own device copy of the weights), in
            seconds per block (CUDA-synchronised), with h3stream's and torch's device peaks and
            the host RSS peak; the node's block 0 on ComfyUI's weights checked bit for bit
            against the resident engine's, a census of block 0's casts (which weights ComfyUI
            handed over in place, which it moved from the host for the call) and how much of
            the model ComfyUI holds on the device
  handover  the hand-over alone: the node's call at --handover-tokens (casts, views, checks)
            minus the resident engine's, per block
  lora      (--lora RANK) a random LoRA on every DiT block linear, loaded by ComfyUI's own
            loader at strength 1 (resident: patched into the weights at load; legacy and
            dynamic: applied by ComfyUI at each cast); per block, on the same block input: the
            node's output vs ComfyUI's patched block (rel-rms <= TOL_BLOCK_REL_RMS), vs
            ComfyUI's unpatched block (>= LORA_MIN_EFFECT: the LoRA took effect), and the path
            the node took (h3stream's, not a fall-back to ComfyUI's block)
  trim      (--trim) the node with its trim_forward control on and off: forward seconds, the
            torch peak over the forward and over the block loop, h3stream's arena peak, the
            bytes trim released, and the outputs bit for bit

--cpu runs any of these small (--preset tiny, --dims) as a smoke test. There --novram cannot be
given (ComfyUI's arguments exclude it with --cpu): --offload legacy loads the model as --novram
loads it (ComfyUI's low-VRAM load, lowvram_model_memory 0.1), so the casts take ComfyUI's
low-VRAM path, patches included, on the CPU. --offload dynamic needs comfy-aimdo on a GPU and
is skipped there.

usage: comfyui_weights_bench.py COMFY_DIR --format int8 --tokens 32768,217088
           [--offload legacy|dynamic] [--lora 16] [--trim] [--measure speed,handover]
       comfyui_weights_bench.py COMFY_DIR --format int8 --blocks 2 --prepare
"""

import argparse
import contextlib
import json
import os
import resource
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import comfyui_e2e  # noqa: E402  (setup_comfy, load_pack, pack_module, make_inputs, forward)

SUFFIX = {"none": "", "legacy": "_offload", "dynamic": "_dynamic"}
# The LoRA must move ComfyUI's block output by ten times the h3stream-vs-ComfyUI tolerance
# for "the node is within tolerance of the patched block" to say anything.
LORA_MIN_EFFECT = 10 * comfyui_e2e.TOL_BLOCK_REL_RMS
# A --vram-headroom above any device's memory: comfy-aimdo's VRAM budget is then always short,
# every weight page it would fault in is refused (VBAR_FAULT_OOM, model-vbar.c), and ComfyUI's
# cast (ops.cast_modules_with_vbar) streams the weight from pinned host memory through its
# cast buffer instead, at every call. Torch's and h3stream's allocations are not refused.
DYNAMIC_HEADROOM_GB = 1024.0


def rss_peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def gib(n):
    return None if n is None else round(n / 2**30, 3)


def dims_for(tokens):
    """(T, H, W, audio_T, text_len) of latents packing to about `tokens` rows at 768x1376
    (48 x 86 latent: 1,032 video rows per latent frame)."""
    text, audio_t = 512, max(1, tokens // 100)
    frames = max(1, (tokens - text - 2 * audio_t) // 1032)
    return frames, 48, 86, audio_t, text


def checkpoint(preset, fmt, blocks):
    """The synthetic checkpoint's path, written once per machine (the device script writes
    every format's file in parallel first); written under a temporary name and renamed, so a
    write cut off never leaves a file that looks complete."""
    import h3stream

    path = os.path.join(tempfile.gettempdir(), f"{preset}_{fmt}_{blocks}blocks.safetensors")
    if not os.path.exists(path):
        t0 = time.perf_counter()
        part = f"{path}.{os.getpid()}.part"
        h3stream.make_checkpoint(part, preset=preset, format=fmt, blocks=blocks, seed=5)
        os.replace(part, path)
        print(f"checkpoint {path}: {os.path.getsize(path) / 2**30:.2f} GiB in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    return path


# -- ComfyUI's memory modes ------------------------------------------------------------
def dynamic_vram_before_comfy():
    """comfy-aimdo's library, loaded as main.py loads it: before ComfyUI's modules import
    comfy_aimdo's bindings, which bind the library when they are imported."""
    import comfy_aimdo.control

    if not comfy_aimdo.control.init(simple_vram_headroom=None, nvml_pressure=True):
        raise RuntimeError("comfy-aimdo did not load: ComfyUI's dynamic VRAM is unavailable")


def dynamic_vram_after_comfy():
    """The rest of main.py's dynamic-VRAM start: aimdo on every device with --vram-headroom,
    and the dynamic ModelPatcher as the one comfy.sd builds models with."""
    import comfy.memory_management
    import comfy.model_management as mm
    import comfy.model_patcher
    import comfy_aimdo.control
    from comfy.cli_args import args

    devices = [(d.index, int(args.vram_headroom * 1024**3)) for d in mm.get_all_torch_devices()]
    if not comfy_aimdo.control.init_devices(devices):
        raise RuntimeError("comfy-aimdo did not start on the devices: dynamic VRAM unavailable")
    comfy.model_patcher.CoreModelPatcher = comfy.model_patcher.ModelPatcherDynamic
    comfy.memory_management.aimdo_enabled = True


def novram_on_cpu():
    """--novram on the CPU, where ComfyUI's arguments exclude it: every model loads as
    --novram loads it on a GPU (lowvram_model_memory 0.1), so each module is cast by
    ComfyUI's low-VRAM path and patches are applied at the cast; nothing moves."""
    import comfy.model_management as mm

    load = mm.LoadedModel.model_load

    def model_load(self, lowvram_model_memory=0, force_patch_weights=False):
        return load(self, 0.1, force_patch_weights)

    mm.LoadedModel.model_load = model_load


# -- block wrappers (outermost patches_replace entries) ---------------------------------
class BlockTimer:
    """CUDA-synchronised wall time of each block call."""

    def __init__(self, index, inner, times, sync):
        self.index, self.inner, self.times, self.sync = index, inner, times, sync

    def __call__(self, args, extra):
        self.sync()
        t0 = time.perf_counter()
        out = self.inner(args, extra) if self.inner is not None else extra["original_block"](args)
        self.sync()
        self.times.append(time.perf_counter() - t0)
        return out


class LoraCapture:
    """Keeps each block's input, ComfyUI's own (patched) block on a copy of it, the node's
    output on it and the path the node took."""

    def __init__(self, index, inner, store):
        self.index, self.inner, self.store = index, inner, store

    def __call__(self, args, extra):
        x_in = args["img"].clone()
        patched = extra["original_block"](dict(args, img=x_in.clone()))["img"]
        out = self.inner(args, extra)
        self.store["blocks"][self.index] = {"x_in": x_in, "patched": patched,
                                            "node": out["img"].clone(),
                                            "path": self.inner.last_path}
        self.store["block_args"] = (args["t_emb"], list(args["mod_segments"]), args["rope_freqs"])
        return out


class PhasePeaks:
    """torch's allocator counters around the block loop: the peak before block 0 (the
    embeds), what is allocated as block 0 starts and after it (trim_forward releases the
    patch embeds inside block 0's call), and the peak over the block loop. counters:
    torch.cuda, or None on the CPU (nothing is read)."""

    def __init__(self, index, last, inner, peaks, counters):
        self.index, self.last, self.inner, self.peaks, self.c = index, last, inner, peaks, counters

    def __call__(self, args, extra):
        c = self.c
        if c is not None and self.index == 0:
            self.peaks["embed"] = c.max_memory_allocated()
            self.peaks["before_block0"] = c.memory_allocated()
            c.reset_peak_memory_stats()
        out = self.inner(args, extra)
        if c is not None and self.index == 0:
            self.peaks["after_block0"] = c.memory_allocated()
        if c is not None and self.index == self.last:
            self.peaks["blocks"] = c.max_memory_allocated()
            c.reset_peak_memory_stats()
        return out


def wrapped(patcher, make):
    """A clone of `patcher` whose every block replacement is make(index, replacement
    installed before, or None)."""
    m = patcher.clone()
    to = m.model_options.setdefault("transformer_options", {})
    replace = to.get("patches_replace", {}).get("dit", {})
    for i in range(len(m.model.diffusion_model.blocks)):
        m.set_model_patch_replace(make(i, replace.get(("double_block", i))), "dit",
                                  "double_block", i)
    return m


def streamed_block(model, index):
    return model.model_options["transformer_options"]["patches_replace"]["dit"][
        ("double_block", index)]


@contextlib.contextmanager
def cast_census(census):
    """Counts, while the node takes a block's weights, what ComfyUI's cast returned for each
    module: its own device tensor (in_place: borrowed, no copy), a weight moved from host
    memory for this call (from_host: ComfyUI's legacy cast buffer, or dynamic VRAM's cast
    buffer where aimdo kept no page), a weight kept in a dynamic-VRAM page (vbar), or a
    temporary made on the device (on_device: a patch applied at the cast); with_patch counts
    the casts that applied an on-the-fly patch (LoRA in low-VRAM and dynamic modes)."""
    import comfy.ops

    comfy_weights = comfyui_e2e.pack_module("comfy_weights")
    cast = comfy.ops.cast_bias_weight

    def counted(s, *a, **k):
        out = cast(s, *a, **k)
        w = out[0]
        if comfy_weights._own(s, w):
            kind = "in_place"
        elif s.weight.device != w.device:
            kind = "vbar" if getattr(s, "_v_signature", None) is not None else "from_host"
        else:
            kind = "on_device"
        census[kind] = census.get(kind, 0) + 1
        if kind == "from_host":
            census["from_host_bytes"] = census.get("from_host_bytes", 0) + sum(
                t.numel() * t.element_size() for t in s.state_dict().values())
        if getattr(s, "weight_function", None) or getattr(s, "weight_lowvram_function", None):
            census["with_patch"] = census.get("with_patch", 0) + 1
        return out

    comfy.ops.cast_bias_weight = counted
    try:
        yield census
    finally:
        comfy.ops.cast_bias_weight = cast


class Bench:
    """One ComfyUI process: the model as ComfyUI loaded it, the node, the resident engine."""

    def __init__(self, args, nodes, torch, h3stream):
        import comfy.model_management as mm
        import comfy.sd

        self.args, self.torch, self.h3 = args, torch, h3stream
        self.mm = mm
        self.cuda = torch.cuda.is_available() and not args.cpu
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        self.backend = "cuda" if self.cuda else "cpu"
        self.suffix = SUFFIX[args.offload]
        comfyui_e2e.load_pack(nodes)
        self.streamed = comfyui_e2e.pack_module("nodes_streamed")
        self.comfy_weights = comfyui_e2e.pack_module("comfy_weights")
        sys.path.insert(0, comfyui_e2e.PACK)  # the pack's comparison helpers, as the e2e takes them
        import h3_compare

        self.rel_rms = h3_compare.rel_rms
        self.ckpt = checkpoint(args.preset, args.format, args.blocks)
        self.patcher = comfy.sd.load_diffusion_model(
            self.ckpt, model_options={"dtype": torch.bfloat16} if args.cpu else {})
        self.dm = self.patcher.model.diffusion_model
        self.dev = mm.get_torch_device()
        self.dtype = self.patcher.model.get_dtype_inference()
        self.cfg = {"video_latent": self.dm.latents_dim, "audio_latent": self.dm.audio_latents_dim,
                    "text_dim": self.dm.condition_proj.weight.shape[1]}
        self.node_cls = nodes.NODE_CLASS_MAPPINGS["H3StreamedBlocks"]
        defaults = {c: v[1]["default"] for c, v in self.node_cls.INPUT_TYPES()["required"].items()
                    if c != "model"}
        self.node_ctl = dict(defaults, min_tokens=0, self_check=False)
        self._resident = None
        self.loaded = None  # the model (a ModelPatcher) ComfyUI loaded last
        self.out_path = os.path.join(args.out, "weights-bench.jsonl")

    @property
    def resident(self):
        """h3stream's resident engine: the checkpoint's blocks uploaded once, its own copy."""
        if self._resident is None:
            self._resident = self.h3.Engine.from_checkpoint(self.ckpt, backend=self.backend)
        return self._resident

    def node_engine(self):
        """The node's engine for this model (it holds the config only), built as the node
        builds it when no node call has yet."""
        for ref, eng in self.streamed._engines.values():
            if ref() is self.dm:
                return eng
        index = (self.dev.index or 0) if self.cuda else 0
        return self.h3.Engine.from_tensors(self.dm.state_dict(), backend=self.backend,
                                           device=index, lazy_blocks=True)

    def record(self, rec):
        rec.update(format=self.args.format, blocks=self.args.blocks, offload=self.args.offload,
                   host_rss_peak_gib=gib(rss_peak()))
        if self.args.offload == "dynamic":
            from comfy.cli_args import args as comfy_args
            rec["vram_headroom_gb"] = comfy_args.vram_headroom
        elif self.args.offload == "legacy" and self.args.cpu:
            rec["offload_emulated"] = "cpu: ComfyUI's --novram load, nothing moves"
        rec.setdefault("torch_peak_gib",
                       gib(self.torch.cuda.max_memory_allocated()) if self.cuda else None)
        print(json.dumps(rec), flush=True)
        with open(self.out_path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def forward(self, model, inputs):
        self.loaded = model
        return comfyui_e2e.forward(model, inputs, self.torch)

    def patch(self, model, **controls):
        (m,) = self.node_cls().patch(model, **dict(self.node_ctl, **controls))
        return m

    def block_inputs(self, S, seed):
        """Random block inputs shaped like ComfyUI's: x [S, hidden], t_emb, three
        modulation segments, h3stream's rope table."""
        torch, dev = self.torch, self.dev
        g = torch.Generator(dev).manual_seed(seed)
        x0 = torch.randn(S, self.dm.hidden_size, generator=g, device=dev).to(torch.bfloat16)
        cfg = self.resident.config
        t_emb = torch.randn(2, cfg["time_dim"], generator=g, device=dev).to(torch.bfloat16)
        text, audio = min(512, S // 4), 2 * max(1, S // 100)
        segs = [(0, text, 1), (text, text + audio, 5), (text + audio, S, 3)]
        ang = torch.rand(S, cfg["rope_dim"] // 2, generator=g, device=dev) * 50.0
        rope = torch.stack([torch.cos(ang), torch.sin(ang)], -1).to(torch.bfloat16)
        return x0, t_emb, segs, rope

    # -- speed ------------------------------------------------------------------------
    def speed(self, dims, warm):
        torch = self.torch
        inputs = comfyui_e2e.make_inputs(torch, self.cfg, self.dev, self.dtype, dims)
        node_model = self.patch(self.patcher)
        block_s = {}
        for name, model in (("comfy", self.patcher), ("node", node_model)):
            times = []
            m = wrapped(model, lambda i, inner: BlockTimer(i, inner, times, self.sync))
            if self.cuda:
                torch.cuda.reset_peak_memory_stats()
            if warm:
                self.forward(m, inputs)  # warm-up (loads, casts, allocator)
            times.clear()
            _, _, secs = self.forward(m, inputs)
            eng = self.node_engine() if name == "node" else None
            block_s[name] = list(times)
            self.record({"mode": name + self.suffix, "tokens": inputs["tokens"],
                         "forward_s": round(secs, 3), "block_s": [round(t, 4) for t in times],
                         "h3stream_arena_peak_gib": gib(eng.arena_peak()) if eng else 0,
                         "h3stream_weight_peak_gib": gib(eng.weight_peak_bytes) if eng else 0})
        # The resident engine on block inputs like ComfyUI's, per block.
        S = inputs["tokens"]
        del inputs
        x0, t_emb, segs, rope = self.block_inputs(S, seed=1)
        opts = self.h3.Options(min_tokens=0)
        times, out0 = [], None
        for rep in range(2 if warm else 1):
            times.clear()
            for i in range(self.args.blocks):
                x = x0.clone()
                self.sync()
                t0 = time.perf_counter()
                self.resident.run_block(i, x, t_emb, segs, rope, options=opts)
                self.sync()
                times.append(time.perf_counter() - t0)
                if i == 0:
                    out0 = x
        # The node's path on the same input, on the weights where ComfyUI keeps them.
        y = x0.clone()
        census = {}
        with cast_census(census), \
                self.comfy_weights.block_weights(self.dm.blocks[0], 0, y) as w:
            self.node_engine().run_block(0, y, t_emb, segs, rope, options=opts, weights=w)
        self.sync()
        equal = bool(torch.equal(y, out0))
        node = block_s["node"]
        self.record({"mode": "resident", "tokens": S, "block_s": [round(t, 4) for t in times],
                     "node_vs_resident": round(sum(node) / sum(times) - 1, 4),
                     "node_bit_equal_block0": equal,
                     "node_casts_block0": census,
                     # what ComfyUI holds in VRAM of the model's weights (its loaded_size)
                     "comfy_weights_in_vram_gib": gib(self.patcher.loaded_size()),
                     "comfy_model_gib": gib(self.patcher.model_size()),
                     "h3stream_arena_peak_gib": gib(self.resident.arena_peak()),
                     "h3stream_weight_gib": gib(self.resident.weight_bytes)})
        return equal

    # -- hand-over --------------------------------------------------------------------
    def handover(self):
        """The node's call at a short length (casts + views + checks + the block) minus the
        resident engine's (the block alone), per block."""
        if self.loaded is None:  # nothing ran yet: ComfyUI places the weights now
            self.mm.load_models_gpu([self.patcher])
            self.loaded = self.patcher
        lazy = self.node_engine()
        x0, t_emb, segs, rope = self.block_inputs(self.args.handover_tokens, seed=2)
        opts = self.h3.Options(min_tokens=0)

        def per_call(fn, reps=5):
            fn()
            self.sync()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            self.sync()
            return (time.perf_counter() - t0) / reps

        def node_call(i):
            y = x0.clone()
            with self.comfy_weights.block_weights(self.dm.blocks[i], i, y) as w:
                lazy.run_block(i, y, t_emb, segs, rope, options=opts, weights=w)

        def resident_call(i):
            self.resident.run_block(i, x0.clone(), t_emb, segs, rope, options=opts)

        hand = {}
        for i in range(self.args.blocks):
            node_s = per_call(lambda: node_call(i))
            base_s = per_call(lambda: resident_call(i))
            hand[i] = {"node_call_s": round(node_s, 4), "resident_call_s": round(base_s, 4),
                       "handover_s": round(node_s - base_s, 4)}
        self.record({"mode": "handover" + self.suffix, "tokens": self.args.handover_tokens,
                     "per_block": hand,
                     "handover_max_s": max(h["handover_s"] for h in hand.values())})

    # -- LoRA -------------------------------------------------------------------------
    def make_lora(self, rank, delta, seed=11):
        """A random LoRA on every DiT block linear, in the generic key form ComfyUI's loader
        maps for any model (comfy/lora.py model_lora_keys_unet:
        "diffusion_model.<module>.lora_up.weight" / ".lora_down.weight", no alpha: scale 1),
        sized so that it moves each weight by `delta` of that weight's own rms."""
        from comfy.quant_ops import QuantizedTensor

        torch = self.torch
        g = torch.Generator("cpu").manual_seed(seed)
        lora = {}
        for i, block in enumerate(self.dm.blocks):
            for name in self.comfy_weights.LINEARS:
                mod = block.get_submodule(name)
                w = mod.weight
                w = w.dequantize() if isinstance(w, QuantizedTensor) else w
                rms = float(w.float().pow(2).mean().sqrt())
                up = torch.randn(mod.out_features, rank, generator=g) * (delta * rms / rank**0.5)
                down = torch.randn(rank, mod.in_features, generator=g)
                key = f"diffusion_model.blocks.{i}.{name}"
                lora[f"{key}.lora_up.weight"] = up.to(torch.bfloat16)
                lora[f"{key}.lora_down.weight"] = down.to(torch.bfloat16)
        return lora

    def lora(self, dims):
        import comfy.sd

        torch, rel_rms = self.torch, self.rel_rms
        lora = self.make_lora(self.args.lora, self.args.lora_delta)
        lpatcher, _ = comfy.sd.load_lora_for_models(self.patcher, None, lora, 1.0, 0)
        applied = sum(1 for k in lpatcher.patches
                      if k.startswith("diffusion_model.blocks.") and k.endswith(".weight"))
        inputs = comfyui_e2e.make_inputs(torch, self.cfg, self.dev, self.dtype, dims)
        store = {"blocks": {}}
        m = wrapped(self.patch(lpatcher), lambda i, inner: LoraCapture(i, inner, store))
        _, _, secs = self.forward(m, inputs)
        census = {}  # block 0's casts with the LoRA model loaded
        y = store["blocks"][0]["x_in"].clone()
        t_emb, segs, rope_freqs = store["block_args"]
        with cast_census(census), \
                self.comfy_weights.block_weights(self.dm.blocks[0], 0, y):
            pass
        # ComfyUI's unpatched blocks on the same inputs: the original model loaded again
        # (ComfyUI takes the LoRA back out of the weights, or stops applying it at the cast).
        self.mm.load_models_gpu([self.patcher])
        self.loaded = self.patcher
        per_block = {}
        with torch.inference_mode():
            for i, b in sorted(store["blocks"].items()):
                unpatched = self.dm.blocks[i](b["x_in"].clone(), t_emb, segs, rope_freqs)
                per_block[i] = {"path": b["path"],
                                "node_vs_patched": rel_rms(b["node"], b["patched"]),
                                "node_vs_unpatched": rel_rms(b["node"], unpatched),
                                "patched_vs_unpatched": rel_rms(b["patched"], unpatched),
                                "block_update": rel_rms(unpatched, b["x_in"])}
        worst = max(d["node_vs_patched"] for d in per_block.values())
        least = min(d["node_vs_unpatched"] for d in per_block.values())
        fallback = [i for i, d in per_block.items() if d["path"] != "h3stream"]
        ok = (worst <= comfyui_e2e.TOL_BLOCK_REL_RMS and least >= LORA_MIN_EFFECT and not fallback
              and applied == len(lora) // 2)
        self.record({"mode": "lora" + self.suffix, "tokens": inputs["tokens"],
                     "rank": self.args.lora, "delta": self.args.lora_delta,
                     "lora_keys_applied": applied, "forward_s": round(secs, 3),
                     "per_block": per_block, "node_casts_block0": census,
                     "tolerance": comfyui_e2e.TOL_BLOCK_REL_RMS, "min_effect": LORA_MIN_EFFECT,
                     "lora_pass": ok})
        return ok

    # -- trim_forward -----------------------------------------------------------------
    def trim(self, dims, warm):
        torch = self.torch
        counters = torch.cuda if self.cuda else None
        inputs = comfyui_e2e.make_inputs(torch, self.cfg, self.dev, self.dtype, dims)
        last = len(self.dm.blocks) - 1
        runs = {}
        for trim in ([True] if warm else []) + [False, True]:  # a first forward warms up
            node_model = self.patch(self.patcher, trim_forward=trim)
            holder = streamed_block(node_model, 0).run.trim
            peaks = {}
            m = wrapped(node_model, lambda i, inner: PhasePeaks(i, last, inner, peaks, counters))
            if self.cuda:
                torch.cuda.reset_peak_memory_stats()
            v, a, secs = self.forward(m, inputs)
            if self.cuda:
                peaks["final"] = torch.cuda.max_memory_allocated()
            runs[trim] = {"v": v, "a": a, "rec": {
                "mode": f"trim_{'on' if trim else 'off'}", "tokens": inputs["tokens"],
                "forward_s": round(secs, 3),
                "torch_peak_gib": gib(max(peaks.values())) if peaks else None,
                "torch_peak_embed_gib": gib(peaks.get("embed")),
                "torch_peak_blocks_gib": gib(peaks.get("blocks")),
                "torch_allocated_before_block0_gib": gib(peaks.get("before_block0")),
                "torch_allocated_after_block0_gib": gib(peaks.get("after_block0")),
                "h3stream_arena_peak_gib": gib(self.node_engine().arena_peak()),
                "released_gib": gib(holder.released_bytes) if holder else 0}}
        on, off = runs[True], runs[False]
        for run in (off, on):
            self.record(run["rec"])
        equal = bool(torch.equal(on["v"], off["v"]) and torch.equal(on["a"], off["a"]))
        # h3stream's arena is the same either way (both records have it): the block loop's
        # device memory moves by torch's part.
        saved = (round(off["rec"]["torch_peak_blocks_gib"] - on["rec"]["torch_peak_blocks_gib"], 3)
                 if self.cuda else None)
        self.record({"mode": "trim", "tokens": inputs["tokens"], "bit_equal": equal,
                     "blocks_peak_saved_gib": saved,
                     "forward_s_on_vs_off": round(on["rec"]["forward_s"] / off["rec"]["forward_s"]
                                                  - 1, 4)})
        return equal


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("comfy")
    ap.add_argument("--format", default="int8", help="int8 | w4a8 | bf16 | nvfp4")
    ap.add_argument("--tokens", default="32768,217088")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--offload", nargs="?", const="legacy", default="none",
                    choices=sorted(SUFFIX),
                    help="ComfyUI's weight placement in this process (bare --offload: legacy)")
    ap.add_argument("--vram-headroom", type=float, default=DYNAMIC_HEADROOM_GB,
                    help="--offload dynamic: ComfyUI's --vram-headroom in GB (default: more "
                         "than the device, so every weight streams from the host)")
    ap.add_argument("--lora", type=int, default=0, metavar="RANK",
                    help="measure a random LoRA of this rank on every block linear")
    ap.add_argument("--lora-delta", type=float, default=1.0,
                    help="the LoRA's change of each weight, relative to the weight's rms")
    ap.add_argument("--trim", action="store_true", help="measure trim_forward on vs off")
    ap.add_argument("--measure", default=None,
                    help="speed,handover,lora,trim (default: speed,handover; lora with "
                         "--lora; trim with --trim)")
    ap.add_argument("--handover-tokens", type=int, default=1024)
    ap.add_argument("--prepare", action="store_true",
                    help="only write the checkpoint (no ComfyUI), for running formats in parallel")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--preset", default="h3", help="tiny: a CPU smoke run of this script")
    ap.add_argument("--cpu", action="store_true", help="ComfyUI on the CPU (smoke run)")
    ap.add_argument("--dims", default=None, help="T,H,W,audio_T,text_len instead of --tokens")
    args = ap.parse_args()
    if args.prepare:
        checkpoint(args.preset, args.format, args.blocks)
        return 0
    measure = (args.measure or ",".join(
        (["lora"] if args.lora else []) + (["trim"] if args.trim else [])) or "speed,handover")
    measure = measure.split(",")
    if set(measure) - {"speed", "handover", "lora", "trim"}:
        ap.error(f"--measure {args.measure}: speed, handover, lora, trim")
    if "lora" in measure and not args.lora:
        ap.error("--measure lora needs --lora RANK")
    os.makedirs(args.out, exist_ok=True)
    if args.offload == "dynamic" and args.cpu:
        rec = {"mode": "skipped", "offload": "dynamic", "format": args.format,
               "why": "ComfyUI's dynamic VRAM (comfy-aimdo) needs a CUDA device; on the CPU "
                      "ComfyUI builds the classic ModelPatcher"}
        print(json.dumps(rec), flush=True)
        with open(os.path.join(args.out, "weights-bench.jsonl"), "a") as f:
            f.write(json.dumps(rec) + "\n")
        return 0
    extra = []
    if args.offload == "legacy" and not args.cpu:
        extra = ["--novram", "--disable-dynamic-vram"]
    elif args.offload == "dynamic":
        extra = ["--vram-headroom", str(args.vram_headroom)]
        dynamic_vram_before_comfy()
    nodes, _ = comfyui_e2e.setup_comfy(os.path.abspath(args.comfy), cpu=args.cpu,
                                       extra_args=extra)
    if args.offload == "dynamic":
        dynamic_vram_after_comfy()
    elif args.offload == "legacy" and args.cpu:
        novram_on_cpu()
    import torch

    import h3stream

    bench = Bench(args, nodes, torch, h3stream)
    shapes = ([tuple(int(v) for v in args.dims.split(","))] if args.dims
              else [dims_for(int(t)) for t in args.tokens.split(",") if t])
    ok = True
    for n, dims in enumerate(shapes):
        warm = n == 0  # later token counts run on warm kernels, casts and allocators
        if "speed" in measure:
            ok = bench.speed(dims, warm) and ok
        if "lora" in measure:
            ok = bench.lora(dims) and ok
        if "trim" in measure:
            ok = bench.trim(dims, warm) and ok
    if "handover" in measure:
        bench.handover()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
