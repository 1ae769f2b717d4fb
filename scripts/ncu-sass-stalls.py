#!/usr/bin/env python3
"""Where a warp-specialised kernel's warps stall, per role, from ncu's source page.

Input: the CSV of `ncu -i REPORT --page source --csv --print-source sass` for one
kernel profiled with `--section SourceCounters` (optionally gzipped). The producer
is the code from the first `USETMAXREG.DEALLOC` on, the consumers the code from
the first `USETMAXREG.TRY_ALLOC` up to it (the layout of our setmaxnreg kernels:
attn_convert_sm90_kernel.cuh). Prints, per role, its share of the warp samples,
its stall reasons, and its instructions holding the most samples.

  usage: scripts/ncu-sass-stalls.py FILE.csv[.gz] [--top N]
"""
import argparse
import csv
import gzip
import io
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"


def read_rows(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(io.StringIO(f.read())))
    # Row 0 names the kernel; row 1 is the header.
    header = rows[1]
    return header, rows[2:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12, help="instructions listed per role")
    args = ap.parse_args()
    header, rows = read_rows(args.csv)
    col = {h: i for i, h in enumerate(header)}
    for need in ("Address", "Source", SAMPLES):
        if need not in col:
            sys.exit(f"{args.csv}: no '{need}' column; export with --page source --csv "
                     "--print-source sass from a report with SourceCounters")
    stalls = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def num(r, h):
        return int(r[col[h]] or 0)

    def addr(r):
        return int(r[col["Address"]], 16)

    def first(op):
        hits = [addr(r) for r in rows if op in r[col["Source"]]]
        return min(hits) if hits else None

    producer_from, consumer_from = first("USETMAXREG.DEALLOC"), first("USETMAXREG.TRY_ALLOC")
    if producer_from is None or consumer_from is None:
        sys.exit(f"{args.csv}: no setmaxnreg pair found; not a warp-specialised kernel")
    total = sum(num(r, SAMPLES) for r in rows)
    roles = {
        "consumers": [r for r in rows if consumer_from <= addr(r) < producer_from],
        "producer": [r for r in rows if addr(r) >= producer_from],
    }
    for role, body in roles.items():
        n = sum(num(r, SAMPLES) for r in body)
        print(f"== {role}: {100 * n / total:.1f}% of {total} warp samples")
        by_reason = sorted(((sum(num(r, h) for r in body), h) for h in stalls), reverse=True)
        for v, h in by_reason[:10]:
            print(f"   {h[len('stall_'):]:20} {100 * v / n:5.1f}%")
        print("   instructions with the most samples (% of the role's):")
        for r in sorted(body, key=lambda r: -num(r, SAMPLES))[:args.top]:
            top = sorted(((num(r, h), h[len("stall_"):]) for h in stalls), reverse=True)[:2]
            why = ", ".join(f"{h} {100 * v / max(num(r, SAMPLES), 1):.0f}%" for v, h in top)
            print(f"   +{addr(r) - producer_from if role == 'producer' else addr(r) - consumer_from:05x}"
                  f" {100 * num(r, SAMPLES) / n:5.1f}%  {r[col['Source']].strip()[:60]:60} {why}")


if __name__ == "__main__":
    main()
