#!/usr/bin/env python3
"""One headline run: the full-size MiniMax-H3 sampled in a real ComfyUI, one node, one
process (ComfyUI's memory flags are per process). scripts/headline-device.sh runs these
behind the memory fence; docs/PERFORMANCE.md reads their records.

What it does, as a ComfyUI user's queue does it:
  - ComfyUI started as main.py starts it: dynamic VRAM (comfy-aimdo, before and after
    ComfyUI's imports) and --fast-disk (weights read from the mapped file, not pinned RAM);
  - the model loaded by the UNETLoader node (the file under models/diffusion_models);
  - the node under test applied: ours (H3 Streamed Blocks, defaults), ours_kvi8s
    (kv_store kvi8s), reference (the reimplemented node's vram_lab.py, its defaults),
    stock (no node);
  - synthetic t2va conditioning (no text encoder on the device) and an empty AV latent of
    --frames at --width x --height made as EmptyMiniMaxH3LatentAV makes it;
  - --steps sampler steps through nodes.common_ksampler (the KSampler node's path), cfg 1.

One JSON record (appended to OUT/headline.jsonl): seconds of each step (each model call,
CUDA-synchronised), the load apart, the driver's device peak (memwatch.py), the host peak
(anonymous + shared RSS, file pages apart, the cgroup's peak), the weight bytes ComfyUI's
casts moved from the host per step, the blocks that fell back to ComfyUI's own, and the
output latent's SHA-256 (saved under --latent-dir for the bit and rel-rms comparisons that
report.py makes). An out-of-memory is a result: recorded with where it happened.

    python3 scripts/headline/run.py .ext/ComfyUI --node ours --checkpoint .ckpt/h3_int8.safetensors
    python3 scripts/headline/run.py .ext/ComfyUI --node ours --cpu --quick   # tiny, on a CPU
"""

import argparse
import hashlib
import importlib.util
import json
import logging
import os
import platform
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "scripts"))
from memwatch import MemWatch  # noqa: E402
from nvml import gib  # noqa: E402

NODES = ("ours", "ours_kvi8s", "reference", "stock")
FPS, AUDIO_FPS = 24, 40  # H3's video frame rate and audio latent rate


# -- ComfyUI started as main.py starts it ----------------------------------------------
def emulate_machine_ram(gib_total):
    """Makes psutil report a machine of `gib_total` GiB (total; available = that less what
    this process's cgroup holds, page cache apart). ComfyUI sizes its pinned host memory from
    psutil's total (comfy.model_management, up to ~90% of RAM): inside a 32 GiB cgroup on a
    128 GiB machine it pinned 38 GiB of weights (measured on the H100 machine), where a 32 GB
    machine's ComfyUI pins about 16. Installed before ComfyUI's imports."""
    import psutil
    from memwatch import cgroup_dir

    real = psutil.virtual_memory
    limit = int(gib_total * 2**30)
    cg = cgroup_dir()

    def charged():
        try:
            cur = int(open(os.path.join(cg, "memory.current")).read())
            stat = dict(l.split() for l in open(os.path.join(cg, "memory.stat")))
            return cur - int(stat.get("file", 0))
        except (OSError, TypeError, ValueError):
            import resource
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def virtual_memory():
        v = real()
        avail = max(0, min(v.available, limit - charged()))
        return v._replace(total=limit, available=avail, free=min(v.free, avail))

    psutil.virtual_memory = virtual_memory


def start_comfy(comfy_dir, cpu, machine_ram_gib=None):
    import comfyui_e2e
    import comfyui_weights_bench as wb

    if machine_ram_gib:
        emulate_machine_ram(machine_ram_gib)
    dynamic = not cpu
    if dynamic:
        wb.dynamic_vram_before_comfy()
    nodes, stubbed = comfyui_e2e.setup_comfy(comfy_dir, cpu, extra_args=["--fast-disk"])
    if dynamic:
        wb.dynamic_vram_after_comfy()
    return nodes, {"dynamic_vram": dynamic, "fast_disk": True, "av_stubbed": stubbed,
                   "torch_alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF")}


def load_reference(path):
    """The reference node's module (vram_lab.py of ComfyUI-MAINodes, carried, never
    committed), imported on its own: it needs only ComfyUI's modules."""
    spec = importlib.util.spec_from_file_location("mainodes_vram_lab", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- inputs ----------------------------------------------------------------------------
def empty_latent(torch, width, height, frames):
    """EmptyMiniMaxH3LatentAV's latent: ComfyUI's own function where it imports (its module
    also imports torchaudio), else the same shapes: frames snapped to 17k + 5, video
    [1, 24, T, H/16, W/16] with T = (frames - 5) / 17 * 5 + 2, audio [1, 32, 2, frames/24*40]."""
    try:
        from comfy_extras.nodes_minimax_h3 import _empty_av_latent

        latent, frame_count = _empty_av_latent(width, height, frames)
        return latent, frame_count, "comfy_extras.nodes_minimax_h3._empty_av_latent"
    except ImportError as e:
        import comfy.nested_tensor

        n = max(5, frames)
        while n % 17 != 5:
            n += 1
        t = 2 if n <= 5 else (n - 5) // 17 * 5 + 2
        video = torch.zeros([1, 24, t, height // 16, width // 16])
        audio = torch.zeros([1, 32, 2, round(n / FPS * AUDIO_FPS)])
        return ({"samples": comfy.nested_tensor.NestedTensor((video, audio))}, n,
                f"restated ({type(e).__name__}: {e})")


def packed_tokens(latent, text_len):
    video, audio = latent["samples"].tensors
    t, h, w = video.shape[2], (video.shape[3] + 1) // 2, (video.shape[4] + 1) // 2
    return text_len + 2 * audio.shape[-1] + t * h * w


def conditioning(torch, text_len, text_dim, seed):
    """t2va conditioning without a text encoder: text states of the encoder's width."""
    g = torch.Generator("cpu").manual_seed(seed)
    ctx = torch.randn(1, text_len, text_dim, generator=g) * 0.5
    return [[ctx, {}]], [[torch.zeros_like(ctx), {}]]


# -- measuring ---------------------------------------------------------------------------
class StepTimer:
    """ComfyUI's unet function wrapper: each model call (one per step at cfg 1), synchronised,
    with the memory and cast census at its end."""

    def __init__(self, torch, watch, census, cuda):
        self.torch, self.watch, self.census, self.cuda = torch, watch, census, cuda
        self.steps, self.started = [], None
        self.first_call_at = None

    def sync(self):
        if self.cuda:
            self.torch.cuda.synchronize()

    def __call__(self, apply_model, args):
        self.sync()
        t0 = time.perf_counter()
        if self.first_call_at is None:
            self.first_call_at = t0
        before = dict(self.census)
        out = apply_model(args["input"], args["timestep"], **args["c"])
        self.sync()
        n = len(self.steps)
        self.watch.mark(f"step{n + 1}")
        self.steps.append({
            "seconds": round(time.perf_counter() - t0, 3),
            "weights_from_host_bytes": self.census.get("from_host_bytes", 0)
            - before.get("from_host_bytes", 0),
            "casts": {k: self.census.get(k, 0) - before.get(k, 0)
                      for k in ("in_place", "vbar", "from_host", "on_device")},
            "memory": self.watch.marks[f"step{n + 1}"]})
        print(f"headline: step {n + 1} in {self.steps[-1]['seconds']:.1f} s", flush=True)
        return out


class BlockPaths:
    """Outermost block replacement: which path each block call took (the node's
    last_path: h3stream or ComfyUI's own block) and its synchronised seconds."""

    def __init__(self, index, inner, log, sync):
        self.index, self.inner, self.log, self.sync = index, inner, log, sync

    def __call__(self, args, extra):
        t0 = time.perf_counter()
        out = self.inner(args, extra) if self.inner is not None else extra["original_block"](args)
        self.sync()
        self.log.append((self.index, getattr(self.inner, "last_path", None) if self.inner else "comfy",
                         time.perf_counter() - t0))
        return out


def sha256_of(tensors):
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()


def oom_where(exc):
    """The innermost frames of an exception's traceback: where memory ran out."""
    frames = traceback.extract_tb(exc.__traceback__)[-4:]
    return [f"{os.path.relpath(f.filename, REPO) if f.filename.startswith(REPO) else f.filename}:"
            f"{f.lineno} {f.name}" for f in frames]


def is_oom(exc):
    text = f"{type(exc).__name__}: {exc}".lower()
    return "out of memory" in text or "outofmemory" in text or "cannot allocate" in text


# -- one run -----------------------------------------------------------------------------
def run(args):
    # ComfyUI's own INFO lines and the node's per-block lines go to the run's log, as
    # main.py's logger shows them on a console
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    watch = MemWatch(use_nvml=not args.cpu).start()  # before CUDA: the context counts
    rec = {"node": args.node, "when": time.strftime("%Y-%m-%d %H:%M:%S"),
           "fence_free_gib": args.fence_free_gib, "steps_asked": args.steps}
    nodes, env = start_comfy(os.path.abspath(args.comfy), args.cpu, args.machine_ram_gib)
    env["machine_ram_gib"] = args.machine_ram_gib
    import comfy.model_management as mm
    import folder_paths
    import torch

    import comfyui_e2e
    import comfyui_weights_bench as wb

    cuda = torch.cuda.is_available() and not args.cpu
    env.update(python=platform.python_version(), torch=torch.__version__,
               device=torch.cuda.get_device_name(0) if cuda else "cpu")
    rec["env"] = env
    ckpt = os.path.abspath(args.checkpoint)
    folder_paths.add_model_folder_path("diffusion_models", os.path.dirname(ckpt))
    t0 = time.perf_counter()
    (model,) = nodes.UNETLoader().load_unet(os.path.basename(ckpt), "default")
    rec["load_s"] = round(time.perf_counter() - t0, 2)
    dm = model.model.diffusion_model
    rec["blocks"] = len(dm.blocks)
    rec["checkpoint"] = {"path": ckpt, "bytes": os.path.getsize(ckpt)}
    blk = dm.blocks[0]
    rec["format"] = args.format or getattr(blk.attn.qkv_proj, "quant_format", None) or "bf16"

    # the pack loads in every run (its cast census below reads comfy_weights); only "ours"
    # applies a node of it
    comfyui_e2e.load_pack(nodes)
    if args.node in ("ours", "ours_kvi8s"):
        controls = dict(json.loads(args.controls)) if args.controls else {}
        if args.quick:
            controls.setdefault("min_tokens", 0)  # the tiny clip is far below the default
        if args.node == "ours_kvi8s":
            controls["kv_store"] = "kvi8s"
        (model,) = nodes.NODE_CLASS_MAPPINGS["H3StreamedBlocks"]().patch(model, **controls)
        rec["controls"] = controls
    elif args.node == "reference":
        ref = load_reference(args.reference_py)
        (model,) = ref.H3StreamedBlocks().patch(model, 16384, 16384, 16384, 32768, 0)
        rec["reference"] = {"module": os.path.relpath(args.reference_py, REPO),
                            "defaults": "q/kv/mlp 16384, min_tokens 32768, kv_block 0, "
                                        "final_layer_chunk 16384 exact, kv_store bf16, trim_forward"}
    latent, frame_count, latent_src = empty_latent(torch, args.width, args.height, args.frames)
    text_dim = dm.condition_proj.weight.shape[1]
    positive, negative = conditioning(torch, args.text_len, text_dim, args.seed)
    tokens = packed_tokens(latent, args.text_len)
    rec.update(frames=frame_count, width=args.width, height=args.height, tokens=tokens,
               latent_made_by=latent_src)
    print(f"headline: {args.node}, {rec['format']}, {rec['blocks']} blocks, {tokens} tokens "
          f"({frame_count} frames {args.width}x{args.height}), fence {args.fence_free_gib} GiB",
          flush=True)

    census = {}
    timer = StepTimer(torch, watch, census, cuda)
    paths = []
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = wb.wrapped(model, lambda i, prev: BlockPaths(i, prev, paths, sync))
    model.set_model_unet_function_wrapper(timer)
    out = None
    watch.mark("sample_start")
    t_sample = time.perf_counter()
    try:
        with wb.cast_census(census):
            (out,) = nodes.common_ksampler(model, args.seed, args.steps, 1.0, "euler", "simple",
                                           positive, negative, latent)
        rec["outcome"] = "completed"
    except Exception as e:  # an out-of-memory is a result
        rec["outcome"] = "oom" if is_oom(e) else "error"
        rec["error"] = f"{type(e).__name__}: {str(e)[:2000]}"
        rec["where"] = oom_where(e)
        traceback.print_exc()
    watch.stop()
    rec["prep_s"] = (round(timer.first_call_at - t_sample, 2) if timer.first_call_at else None)
    rec["steps"] = timer.steps
    secs = [s["seconds"] for s in timer.steps]
    rec["seconds_per_step"] = secs[1] if len(secs) > 1 else (secs[0] if secs else None)
    rec["first_step_extra_s"] = round(secs[0] - secs[1], 3) if len(secs) > 1 else None
    rec["weights_from_host_gb_per_step"] = [round(s["weights_from_host_bytes"] / 1e9, 3)
                                            for s in timer.steps]
    # every byte into the device per step, by the driver's PCIe counters (weights, staging)
    to_dev = [watch.marks["sample_start"]["bus_gb"]["to_device"]] + [
        s["memory"]["bus_gb"]["to_device"] for s in timer.steps]
    rec["bus_to_device_gb_per_step"] = [round(b - a, 2) for a, b in zip(to_dev, to_dev[1:])]
    rec["device_peak_gib"] = watch.device_peak()
    peaks = watch.peaks()
    rec["host_peak_gib"] = peaks.get("host_anon_shmem")
    rec["memory_peaks"] = peaks
    rec["comfy_pinned_gib"] = gib(getattr(mm, "TOTAL_PINNED_MEMORY", 0))
    if cuda:
        rec["torch_max_reserved_gib"] = gib(torch.cuda.max_memory_reserved())
    n_blocks = rec["blocks"]
    calls = [p for p in paths]
    rec["block_calls"] = len(calls)
    if args.node in ("ours", "ours_kvi8s"):
        rec["fallback_blocks"] = sorted({i for i, path, _ in calls if path != "h3stream"})
    else:
        rec["fallback_blocks"] = None
    by_step = [calls[k * n_blocks:(k + 1) * n_blocks] for k in range(len(timer.steps))]
    rec["block_seconds"] = [{"mean": round(sum(s for *_, s in st) / max(1, len(st)), 4),
                             "max": round(max((s for *_, s in st), default=0), 4)} for st in by_step]
    rec["bit_equal"] = None
    rec["rel_rms_vs_reference"] = None
    if out is not None:
        tensors = [t.float() if t.dtype == torch.bfloat16 else t for t in out["samples"].tensors]
        rec["latent_sha256"] = sha256_of(out["samples"].tensors)
        rec["latent_shapes"] = [list(t.shape) for t in out["samples"].tensors]
        rec["latent_finite"] = all(bool(torch.isfinite(t).all()) for t in tensors)
        if args.latent_dir:
            os.makedirs(args.latent_dir, exist_ok=True)
            path = os.path.join(args.latent_dir, f"{args.name}.pt")
            torch.save([t.detach().cpu() for t in out["samples"].tensors], path)
            rec["latent_file"] = path
    rec["name"] = args.name
    os.makedirs(args.out, exist_ok=True)
    for path in filter(None, (os.path.join(args.out, "headline.jsonl"), args.history)):
        with open(path, "a") as f:
            f.write(json.dumps(rec) + "\n")
    summary = {k: rec.get(k) for k in ("name", "node", "outcome", "tokens", "seconds_per_step",
                                       "first_step_extra_s", "device_peak_gib", "host_peak_gib",
                                       "fallback_blocks", "error")}
    print("headline: " + json.dumps(summary), flush=True)
    return 0 if rec["outcome"] == "completed" or args.node == "stock" else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("comfy", help="a ComfyUI checkout with comfy/ldm/minimax (the H3 model)")
    ap.add_argument("--node", required=True, choices=NODES)
    ap.add_argument("--checkpoint", help="the H3 checkpoint (default with --quick: a tiny one)")
    ap.add_argument("--format", default=None, help="recorded format (default: read from the model)")
    ap.add_argument("--frames", type=int, default=702)
    ap.add_argument("--width", type=int, default=1376)
    ap.add_argument("--height", type=int, default=768)
    ap.add_argument("--text-len", type=int, default=512)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--controls", default=None, help="JSON of our node's controls")
    ap.add_argument("--reference-py", default=os.path.join(REPO, ".ext", "MAINodes", "vram_lab.py"))
    ap.add_argument("--fence-free-gib", type=float, default=None,
                    help="the fence this run stands behind (recorded; scripts/headline/fence.py sets it)")
    ap.add_argument("--name", default=None, help="the record's name (default: the node)")
    ap.add_argument("--latent-dir", default=None, help="where the output latent is saved")
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(REPO, "out", "headline")))
    ap.add_argument("--history", default=None,
                    help="a second JSON-lines file the record is appended to (kept across calls)")
    ap.add_argument("--machine-ram-gib", type=float, default=None,
                    help="emulate a machine of this much RAM for ComfyUI's sizing (psutil)")
    ap.add_argument("--cpu", action="store_true", help="ComfyUI on the CPU (a smoke run)")
    ap.add_argument("--quick", action="store_true",
                    help="a tiny checkpoint and a short clip (with --cpu: the CPU smoke run)")
    args = ap.parse_args()
    args.name = args.name or args.node
    if args.quick:
        if not args.checkpoint:
            import h3stream

            args.checkpoint = os.path.join(tempfile.gettempdir(), "h3s-headline", "tiny_int8.safetensors")
            if not os.path.exists(args.checkpoint):
                os.makedirs(os.path.dirname(args.checkpoint), exist_ok=True)
                h3stream.make_checkpoint(args.checkpoint, preset="tiny", format="int8")
        if args.frames == 702:
            args.frames, args.width, args.height, args.text_len = 22, 448, 256, 16
    if not args.checkpoint:
        ap.error("--checkpoint is required (or --quick)")
    if args.node == "reference" and not os.path.exists(args.reference_py):
        ap.error(f"--reference-py {args.reference_py}: not found (scripts/headline/prepare.sh "
                 "extracts it from ComfyUI-MAINodes at 78c1ad2)")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
