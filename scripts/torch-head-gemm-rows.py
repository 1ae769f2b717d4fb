#!/usr/bin/env python3
"""Is torch's fp32 GEMM (F.linear, cuBLAS) row-invariant at H3's output-head shapes?

The cause behind final_layer_gemm=streamed's old tail mismatch. The heads are video_out
[96, 5376] and audio_out [32, 5376], fp32 with bias. For each M, chunk size and TF32
setting, this compares one call over all M rows with calls over row chunks (a tail
shorter than 512 rows joins the previous chunk, as the node does), bit for bit. It
prints one JSON line per case: how many rows differ, the first and last of them, and the
largest difference relative to the output's largest magnitude.

  usage: python3 scripts/torch-head-gemm-rows.py        (needs a CUDA GPU)
Measured on an H100 on 2026-12-05: bench/results/2026-12-05_h100_torch_fp32_head_gemm_rows.jsonl.
scripts/final-layer-rows-check.py checks the node's own final layer.
"""
import json

import torch

K = 5376


def chunks(n, c, merge=512):
    b = list(range(0, n, c)) + [n]
    if len(b) > 2 and b[-1] - b[-2] < merge:
        del b[-2]
    return list(zip(b[:-1], b[1:]))


def main():
    torch.manual_seed(0)
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for n_out in (96, 32):
            w = torch.randn(n_out, K, device="cuda") * 0.02
            bias = torch.randn(n_out, device="cuda") * 0.01
            for m in (217088, 100003, 20000):
                x = torch.randn(m, K, device="cuda")
                full = torch.nn.functional.linear(x, w, bias)
                for c in (16384, 4096, 1024):
                    out = torch.empty_like(full)
                    for lo, hi in chunks(m, c):
                        out[lo:hi] = torch.nn.functional.linear(x[lo:hi], w, bias)
                    differ = (out != full).any(dim=1)
                    bad = differ.nonzero().flatten()
                    print(json.dumps(dict(
                        tf32=tf32, N=n_out, M=m, chunk=c, rows_differ=int(differ.sum()),
                        max_rel=((out - full).abs().max() / full.abs().max()).item(),
                        first_bad=int(bad[0]) if len(bad) else None,
                        last_bad=int(bad[-1]) if len(bad) else None)), flush=True)
                del x, full
    print(json.dumps(dict(torch=torch.__version__, device=torch.cuda.get_device_name())))


if __name__ == "__main__":
    main()
