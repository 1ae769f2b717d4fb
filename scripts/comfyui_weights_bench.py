#!/usr/bin/env python3
"""The node's weight hand-over in a real ComfyUI, measured (issue 10; docs/COMFYUI.md).

For a full-width H3 checkpoint (hidden 5376, 4 DiT blocks, written by
h3stream.make_checkpoint) loaded by ComfyUI's own loader, at each token count:

  comfy      ComfyUI's own blocks, weights resident on the GPU (no node)
  node       "H3 Streamed Blocks" (defaults), weights resident on the GPU: each call
             takes them as ComfyUI casts them (comfy_weights.py), in place
  resident   h3stream's own engine (Engine.from_checkpoint, blocks uploaded once)

and in a second process with ComfyUI offloading every weight to the host (--novram
--disable-dynamic-vram: each module's weight moves through ComfyUI's pinned buffers and
offload stream at its cast):

  comfy_offload, node_offload

Per mode: seconds per block (CUDA-synchronised around each block), the hand-over alone
(the node's per-call cost at 1,024 tokens minus the resident engine's), h3stream's
device bytes (arena peak + weight stores) and the process's torch peak, host RSS peak;
the node's blocks checked bit for bit against the resident engine's on block 0. Writes
one JSON object per mode to --out/weights-bench.jsonl.

usage: comfyui_weights_bench.py COMFY_DIR --format int8 --tokens 32768,217088 [--offload]
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import comfyui_e2e  # noqa: E402  (setup_comfy, load_pack, pack_module)


def rss_peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def dims_for(tokens):
    """(T, H, W, audio_T, text_len) of latents packing to about `tokens` rows at 768x1376
    (48 x 86 latent: 1,032 video rows per latent frame)."""
    text, audio_t = 512, max(1, tokens // 100)
    frames = max(1, (tokens - text - 2 * audio_t) // 1032)
    return frames, 48, 86, audio_t, text


class BlockTimer:
    """Outermost block replacement: CUDA-synchronised wall time of each block call."""

    def __init__(self, index, inner, times, sync):
        self.index, self.inner, self.times, self.sync = index, inner, times, sync

    def __call__(self, args, extra):
        self.sync()
        t0 = time.perf_counter()
        out = self.inner(args, extra) if self.inner is not None else extra["original_block"](args)
        self.sync()
        self.times.append(time.perf_counter() - t0)
        return out


def timed(patcher, sync):
    times = []
    m = patcher.clone()
    to = m.model_options.setdefault("transformer_options", {})
    replace = to.get("patches_replace", {}).get("dit", {})
    for i in range(len(m.model.diffusion_model.blocks)):
        m.set_model_patch_replace(BlockTimer(i, replace.get(("double_block", i)), times, sync),
                                  "dit", "double_block", i)
    return m, times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("comfy")
    ap.add_argument("--format", default="int8")
    ap.add_argument("--tokens", default="32768,217088")
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--offload", action="store_true",
                    help="this process runs ComfyUI with --novram --disable-dynamic-vram")
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    ap.add_argument("--preset", default="h3", help="tiny: a CPU smoke run of this script")
    ap.add_argument("--cpu", action="store_true", help="ComfyUI on the CPU (smoke run)")
    ap.add_argument("--dims", default=None, help="T,H,W,audio_T,text_len instead of --tokens")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    extra = ["--novram", "--disable-dynamic-vram"] if args.offload else []
    nodes, _ = comfyui_e2e.setup_comfy(os.path.abspath(args.comfy), cpu=args.cpu,
                                       extra_args=extra)
    import comfy.model_management as mm
    import comfy.sd
    import torch

    import h3stream

    cuda = torch.cuda.is_available() and not args.cpu
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    comfyui_e2e.load_pack(nodes)
    streamed = comfyui_e2e.pack_module("nodes_streamed")
    comfy_weights = comfyui_e2e.pack_module("comfy_weights")
    ckpt = os.path.join(tempfile.gettempdir(),
                        f"{args.preset}_{args.format}_{args.blocks}blocks.safetensors")
    if not os.path.exists(ckpt):
        t0 = time.perf_counter()
        h3stream.make_checkpoint(ckpt, preset=args.preset, format=args.format, blocks=args.blocks,
                                 seed=5)
        print(f"checkpoint {ckpt}: {os.path.getsize(ckpt) / 2**30:.2f} GiB in "
              f"{time.perf_counter() - t0:.1f} s", flush=True)
    patcher = comfy.sd.load_diffusion_model(
        ckpt, model_options={"dtype": torch.bfloat16} if args.cpu else {})
    dm = patcher.model.diffusion_model
    dev = mm.get_torch_device()
    dtype = patcher.model.get_dtype_inference()
    cfg = {"video_latent": dm.latents_dim, "audio_latent": dm.audio_latents_dim,
           "text_dim": dm.condition_proj.weight.shape[1]}
    out_path = os.path.join(args.out, "weights-bench.jsonl")
    defaults = {c: v[1]["default"] for c, v in
                nodes.NODE_CLASS_MAPPINGS["H3StreamedBlocks"].INPUT_TYPES()["required"].items()
                if c != "model"}
    node_ctl = dict(defaults, min_tokens=0, self_check=False)
    backend = "cuda" if cuda else "cpu"
    engine = None if args.offload else h3stream.Engine.from_checkpoint(ckpt, backend=backend)

    def record(rec):
        rec.update(format=args.format, blocks=args.blocks, offload=args.offload,
                   host_rss_peak_gib=round(rss_peak() / 2**30, 2),
                   torch_peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda
                   else None)
        print(json.dumps(rec), flush=True)
        with open(out_path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    shapes = ([tuple(int(v) for v in args.dims.split(","))] if args.dims
              else [dims_for(int(t)) for t in args.tokens.split(",")])
    for n, dims in enumerate(shapes):
        warm = n == 0  # later token counts run on warm kernels, casts and allocators
        inputs = comfyui_e2e.make_inputs(torch, cfg, dev, dtype, dims)
        modes = [("comfy_offload" if args.offload else "comfy", patcher)]
        (node_model,) = nodes.NODE_CLASS_MAPPINGS["H3StreamedBlocks"]().patch(patcher, **node_ctl)
        modes.append(("node_offload" if args.offload else "node", node_model))
        for name, model in modes:
            m, times = timed(model, sync)
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            if warm:
                comfyui_e2e.forward(m, inputs, torch)  # warm-up (loads, casts, allocator)
            times.clear()
            _, _, secs = comfyui_e2e.forward(m, inputs, torch)
            eng = next(iter(streamed._engines.values()))[1] if name.startswith("node") else None
            record({"mode": name, "tokens": inputs["tokens"], "forward_s": round(secs, 3),
                    "block_s": [round(t, 4) for t in times],
                    "h3stream_arena_peak_gib": round(eng.arena_peak() / 2**30, 2) if eng else 0,
                    "h3stream_weight_peak_gib": round(eng.weight_peak_bytes / 2**30, 3) if eng
                    else 0})
        if engine is not None:
            # h3stream's resident engine on block inputs like ComfyUI's, per block.
            S, hidden = inputs["tokens"], dm.hidden_size
            g = torch.Generator("cpu").manual_seed(1)
            x0 = torch.randn(S, hidden, generator=g).to(dev, torch.bfloat16)
            t_emb = torch.randn(2, engine.config["time_dim"], generator=g).to(dev, torch.bfloat16)
            text, audio = min(512, S // 4), 2 * max(1, S // 100)
            segs = [(0, text, 1), (text, text + audio, 5), (text + audio, S, 3)]
            ang = torch.rand(S, engine.config["rope_dim"] // 2, generator=g) * 50.0
            rope = torch.stack([torch.cos(ang), torch.sin(ang)], -1).to(dev, torch.bfloat16)
            opts = h3stream.Options(min_tokens=0)
            times, outs = [], {}
            for rep in range(2 if warm else 1):
                for i in range(args.blocks):
                    x = x0.clone()
                    sync()
                    t0 = time.perf_counter()
                    engine.run_block(i, x, t_emb, segs, rope, options=opts)
                    sync()
                    if rep == (1 if warm else 0):
                        times.append(time.perf_counter() - t0)
                        outs[i] = x if i == 0 else None
            # The node's path on the same inputs: bit-equal to the resident engine.
            lazy = next(iter(streamed._engines.values()))[1]
            y = x0.clone()
            with comfy_weights.block_weights(dm.blocks[0], 0, y) as w:
                lazy.run_block(0, y, t_emb, segs, rope, options=opts, weights=w)
            sync()
            record({"mode": "resident", "tokens": S, "block_s": [round(t, 4) for t in times],
                    "node_bit_equal_block0": bool(torch.equal(y, outs[0])),
                    "h3stream_arena_peak_gib": round(engine.arena_peak() / 2**30, 2),
                    "h3stream_weight_gib": round(engine.weight_bytes / 2**30, 3)})
    # The hand-over alone: the node's call at 1,024 tokens (cast + views + prepare) minus
    # the resident engine's (or the bare block call, offloaded).
    lazy = next(iter(streamed._engines.values()))[1]
    S = 1024
    g = torch.Generator("cpu").manual_seed(2)
    x0 = torch.randn(S, dm.hidden_size, generator=g).to(dev, torch.bfloat16)
    t_emb = torch.randn(2, lazy.config["time_dim"], generator=g).to(dev, torch.bfloat16)
    segs = [(0, S, 0)]
    rope = torch.zeros(S, lazy.config["rope_dim"] // 2, 2, dtype=torch.bfloat16, device=dev)
    opts = h3stream.Options(min_tokens=0)

    def per_call(fn, reps=5):
        fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        return (time.perf_counter() - t0) / reps

    def node_call(i):
        y = x0.clone()
        with comfy_weights.block_weights(dm.blocks[i], i, y) as w:
            lazy.run_block(i, y, t_emb, segs, rope, options=opts, weights=w)

    hand = {}
    for i in range(args.blocks):
        node_s = per_call(lambda: node_call(i))
        base_s = per_call(lambda: engine.run_block(i, x0.clone(), t_emb, segs, rope,
                                                   options=opts)) if engine else None
        hand[i] = {"node_call_s": round(node_s, 4),
                   "resident_call_s": round(base_s, 4) if base_s is not None else None,
                   "handover_s": round(node_s - base_s, 4) if base_s is not None else None}
    record({"mode": "handover" + ("_offload" if args.offload else ""), "tokens": S,
            "per_block": hand})
    return 0


if __name__ == "__main__":
    sys.exit(main())
