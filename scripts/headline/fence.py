#!/usr/bin/env python3
"""A memory fence: this process takes device memory until only --free-gib GiB are free,
holds it until it is sent SIGTERM (or --max-seconds pass), and records the driver's free
memory before, once the fence stands, and as it ends. It stands in for a smaller card the
way the reference node's measurements did (a balloon on a large card leaving 15.4 GiB free):
the process under test sees only what is left, its CUDA context included.

    python3 scripts/headline/fence.py --free-gib 15.4 --ready /tmp/fence.ready --record fence.json &
    # wait for /tmp/fence.ready, run, then: kill -TERM $!

Exits 2 when the device has less free memory than asked (no fence possible) and 1 when the
free memory cannot be brought within --tolerance-mib of the target."""

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nvml import Nvml, gib  # noqa: E402

GIB = 2**30
MIB = 2**20


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--free-gib", type=float, required=True, help="device memory left free")
    ap.add_argument("--ready", required=True, help="file written once the fence stands")
    ap.add_argument("--record", required=True, help="JSON record of the fence's readings")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--tolerance-mib", type=float, default=32.0)
    ap.add_argument("--max-seconds", type=float, default=3600.0,
                    help="give the memory back after this long even without a signal")
    args = ap.parse_args()
    nvml = Nvml(args.device)
    rec = {"free_gib_target": args.free_gib, "pid": os.getpid()}
    total, free, used = nvml.memory()
    rec["before"] = {"total_gib": gib(total), "free_gib": gib(free), "used_gib": gib(used)}

    import torch

    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    torch.empty(1, device=dev)  # the context first: it takes its share of the card
    target = int(args.free_gib * GIB)
    held = []

    def cuda_free():
        return torch.cuda.mem_get_info(dev)[0]

    if cuda_free() < target:
        rec["error"] = (f"the device has {gib(cuda_free())} GiB free, less than the fence's "
                        f"{args.free_gib} GiB: nothing to fence")
        json.dump(rec, open(args.record, "w"), indent=1)
        print(f"fence: {rec['error']}", file=sys.stderr)
        return 2
    # Large pieces first, then 2 MiB steps (the allocation granule) to land on the target.
    while cuda_free() - target > 4 * MIB:
        step = max(2 * MIB, (cuda_free() - target) // 2 if held else cuda_free() - target - 512 * MIB)
        try:
            held.append(torch.empty(int(step), dtype=torch.uint8, device=dev))
        except RuntimeError:
            break
    left = cuda_free()
    total, nv_free, used = nvml.memory()
    rec["standing"] = {"cuda_free_gib": gib(left), "nvml_free_gib": gib(nv_free),
                       "nvml_used_gib": gib(used), "held_gib": gib(sum(t.numel() for t in held))}
    if abs(left - target) > args.tolerance_mib * MIB:
        rec["error"] = f"free memory {gib(left)} GiB, not within {args.tolerance_mib} MiB of the target"
        json.dump(rec, open(args.record, "w"), indent=1)
        print(f"fence: {rec['error']}", file=sys.stderr)
        return 1
    json.dump(rec, open(args.record, "w"), indent=1)
    with open(args.ready, "w") as f:
        f.write(f"{left}\n")
    print(f"fence: {gib(left)} GiB free (NVML {gib(nv_free)}), holding {rec['standing']['held_gib']} GiB",
          flush=True)

    stop = {"signal": None}

    def on_signal(signum, _frame):
        stop["signal"] = signum

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    t0 = time.monotonic()
    low = nv_free
    while stop["signal"] is None and time.monotonic() - t0 < args.max_seconds:
        time.sleep(0.05)
        low = min(low, nvml.memory()[1])
    total, free, used = nvml.memory()
    rec["after"] = {"nvml_free_gib": gib(free), "nvml_used_gib": gib(used),
                    "lowest_nvml_free_gib": gib(low), "held_seconds": round(time.monotonic() - t0, 1),
                    "ended_by": "signal" if stop["signal"] else "max_seconds"}
    json.dump(rec, open(args.record, "w"), indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
