"""Cost of the ComfyUI node's per-call weights (Engine lazy_blocks + load_block/drop_block)
against a resident engine, on one full-size H3 block on the GPU.

    python3 scripts/bench-lazy-block.py [--format int8] [--tokens 32768,217088] [--out FILE]

Writes one JSON line per length: seconds of run_block (streamed, default controls) with the
block resident, and of load_block + run_block + drop_block with the block handed over from
CUDA tensors (as ComfyUI holds them); both results must be equal bit for bit.
"""
import argparse
import json
import os
import tempfile
import time

import torch
from safetensors.torch import load_file

import h3stream


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--format", default="int8")
    ap.add_argument("--tokens", default="32768,217088")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    path = os.path.join(tempfile.mkdtemp(), f"h3_1block_{a.format}.safetensors")
    h3stream.make_checkpoint(path, preset="h3", format=a.format, blocks=1)
    sd = {k: v.cuda() for k, v in load_file(path).items()}
    block = {k: v for k, v in sd.items() if k.startswith("blocks.0.")}
    block_bytes = sum(v.numel() * v.element_size() for v in block.values())
    resident = h3stream.Engine.from_tensors(sd, backend="cuda")
    lazy = h3stream.Engine.from_tensors(sd, backend="cuda", lazy_blocks=True)
    cfg = resident.config
    lines = []
    for s in [int(t) for t in a.tokens.split(",")]:
        g = torch.Generator(device="cuda").manual_seed(s)
        x0 = torch.randn(s, cfg["hidden"], device="cuda", generator=g).to(torch.bfloat16)
        t_emb = torch.randn(1, cfg["time_dim"], device="cuda", generator=g).to(torch.bfloat16)
        ang = torch.rand(s, cfg["rope_dim"] // 2, device="cuda", generator=g) * 50
        rope = torch.stack([ang.cos(), ang.sin()], -1).to(torch.bfloat16).contiguous()
        runs = [(0, s, 0)]
        xr, xl = x0.clone(), x0.clone()
        resident.run_block(0, x0.clone(), t_emb, runs, rope)  # upload + warm-up
        t_res = timed(lambda: resident.run_block(0, xr, t_emb, runs, rope))

        def per_call():
            lazy.load_block(0, block)
            lazy.run_block(0, xl, t_emb, runs, rope)
            lazy.drop_block(0)

        t_load = timed(lambda: lazy.load_block(0, block))
        lazy.drop_block(0)
        t_lazy = timed(per_call)
        line = {"tokens": s, "format": a.format, "block_weight_bytes": block_bytes,
                "resident_s": round(t_res, 4), "per_call_s": round(t_lazy, 4),
                "load_block_s": round(t_load, 4),
                "overhead": round(t_lazy / t_res - 1, 4),
                "bit_equal": bool(torch.equal(xr.view(torch.int16), xl.view(torch.int16)))}
        print(json.dumps(line), flush=True)
        lines.append(line)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(json.dumps(l) for l in lines) + "\n")


if __name__ == "__main__":
    main()
