"""Does copy-engine traffic slow the MLP's kinds of kernels on this GPU?

With a host-staged residual, the streamed block's MLP phase moves each chunk's
x in and out (176 MB each way at 217k tokens) while the previous chunk
computes; measured there, a chunk took ~21 ms against ~13 ms with x resident,
with no wait on a copy. This times, alone and beside 176 MB pinned<->device
copies on two streams (one each way, back to back), the MLP chunk's kinds of
work at H3's shapes: an int8 GEMM (torch._int_mm), a bf16 GEMM and a memory-
bound elementwise pass. One JSON line per case.

    python3 bench/dma_mlp_probe.py [rows]
"""
import json
import sys

import torch


def timed(fn, reps=10):
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / reps


def main():
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    hidden, ffn = 5376, 21504
    dev = torch.device("cuda")
    a8 = torch.randint(-127, 127, (rows, hidden), dtype=torch.int8, device=dev)
    w8 = torch.randint(-127, 127, (ffn, hidden), dtype=torch.int8, device=dev).t()
    a16 = torch.randn(rows, hidden, dtype=torch.bfloat16, device=dev)
    w16 = torch.randn(ffn, hidden, dtype=torch.bfloat16, device=dev).t()
    big = torch.randn(rows, ffn, dtype=torch.bfloat16, device=dev)
    cases = {
        "int8_gemm": lambda: torch._int_mm(a8, w8),
        "bf16_gemm": lambda: a16 @ w16,
        "elementwise": lambda: big.mul_(1.0001),
    }
    chunk = rows * hidden * 2
    host_in = torch.empty(chunk, dtype=torch.uint8, pin_memory=True)
    host_out = torch.empty(chunk, dtype=torch.uint8, pin_memory=True)
    dev_in = torch.empty(chunk, dtype=torch.uint8, device=dev)
    dev_out = torch.empty(chunk, dtype=torch.uint8, device=dev)
    s_in, s_out = torch.cuda.Stream(), torch.cuda.Stream()

    def copies(n):
        for _ in range(n):
            with torch.cuda.stream(s_in):
                dev_in.copy_(host_in, non_blocking=True)
            with torch.cuda.stream(s_out):
                host_out.copy_(dev_out, non_blocking=True)

    for name, fn in cases.items():
        alone = timed(fn)
        copies(40)  # queued ahead: ~130 ms of traffic each way
        beside = timed(fn)
        torch.cuda.synchronize()
        print(json.dumps({"case": name, "rows": rows, "alone_ms": round(alone, 3),
                          "beside_copies_ms": round(beside, 3),
                          "slowdown": round(beside / alone, 3)}))


if __name__ == "__main__":
    main()
