#!/usr/bin/env python3
"""The headline runs side by side: each run's latest record (run.py), completed with what
needs two runs, and a markdown table.

  bit_equal             a fenced run of ours against ours_unfenced (the same steps and clip),
                        bit for bit: the latents
                        compared where both files are here, else their SHA-256 and shapes
                        (run.py hashes the bytes; records from two machines compare so);
                        null where either is missing or the run is not ours
  rel_rms_vs_exact      ours_kvi8s (and any run) against ours_unfenced, the exact store; where
                        no unfenced run is here, kvi8s against a fenced exact run of ours
                        with the same clip and steps (rel_rms_vs_exact_against names it)
  rel_rms_vs_reference  any run against the reference node's latent
  ratio_vs_reference    our steady step over the reference's (same machine)

Exits 1 when a comparison that should be bit-equal is not (a fenced exact run of ours
against the unfenced one).

    python3 scripts/headline/report.py HISTORY.jsonl [--out DIR]
"""

import argparse
import json
import math
import os
import sys

EXACT = "ours_unfenced"
# runs that must give the unfenced exact run's bits: our exact node under any fence
MUST_EQUAL = ("ours", "ours_15.0")


def latest(path):
    runs = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                r = json.loads(line)
                runs[r.get("name", r["node"])] = r
    return runs


def load_latent(rec):
    import torch

    path = rec.get("latent_file")
    if not path or not os.path.exists(path):
        return None
    return torch.load(path)


def bits_equal(a, b):
    import torch

    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or x.dtype != y.dtype:
            return False
        if not torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)):
            return False
    return True


def rel_rms(a, b):
    """rms(a - b) / rms(b) over every element of the video and audio latents, in fp64."""
    num = den = 0.0
    for x, y in zip(a, b):
        x, y = x.double(), y.double()
        num += float(((x - y) ** 2).sum())
        den += float((y ** 2).sum())
    return math.sqrt(num / den) if den > 0 else None


def complete(runs):
    lat = {name: load_latent(r) for name, r in runs.items()}
    exact, ref = lat.get(EXACT), lat.get("reference")
    exact_rec = runs.get(EXACT)
    stand_in = None  # the fenced run whose latent stands in for the unfenced one's
    if exact is None and exact_rec is not None:
        # the unfenced latent is on another machine: a fenced exact run here with its hash
        # holds the same bits (kvi8s' rel-rms against the exact store needs the tensors)
        for name in MUST_EQUAL:
            r = runs.get(name)
            if (r and lat.get(name) is not None and r.get("latent_sha256")
                    and r["latent_sha256"] == exact_rec.get("latent_sha256")):
                exact, stand_in = lat[name], name
                break
    ref_step = runs.get("reference", {}).get("seconds_per_step")
    ok = True
    shape = ("steps_asked", "frames", "width", "height", "format")

    def comparable(r):  # the same run but for the fence: else no bits to compare
        return exact_rec is not None and all(r.get(k) == exact_rec.get(k) for k in shape)

    for name, r in runs.items():
        mine = lat[name] if comparable(r) and name != stand_in else None
        if (name != EXACT and r["node"] == "ours" and (mine is None or exact is None)
                and comparable(r) and r.get("latent_sha256") and exact_rec.get("latent_sha256")):
            # one of the files is on another machine: the bytes' hashes and the shapes
            r["bit_equal"] = (r["latent_sha256"] == exact_rec["latent_sha256"]
                              and r.get("latent_shapes") == exact_rec.get("latent_shapes"))
            r["bit_equal_to"] = f"{EXACT} (SHA-256)"
            if name in MUST_EQUAL and not r["bit_equal"]:
                ok = False
        if name != EXACT and r["node"] in ("ours", "ours_kvi8s") and mine is not None and exact is not None:
            if r["node"] == "ours":
                r["bit_equal"] = bits_equal(mine, exact)
                r["bit_equal_to"] = EXACT
                if name in MUST_EQUAL and not r["bit_equal"]:
                    ok = False
            r["rel_rms_vs_exact"] = rel_rms(mine, exact)
        elif r["node"] == "ours_kvi8s" and r.get("rel_rms_vs_exact") is None:
            # no unfenced run on this machine: a fenced exact run of the same clip and steps
            # (its bits equal the unfenced run's wherever both were compared)
            for other in MUST_EQUAL:
                o = runs.get(other)
                if o and lat.get(other) is not None and lat[name] is not None and all(
                        o.get(k) == r.get(k) for k in shape):
                    r["rel_rms_vs_exact"] = rel_rms(lat[name], lat[other])
                    r["rel_rms_vs_exact_against"] = other
                    break
        ref_rec = runs.get("reference", {})
        if (name != "reference" and lat[name] is not None and ref is not None
                and all(r.get(k) == ref_rec.get(k) for k in shape)):
            r["rel_rms_vs_reference"] = rel_rms(lat[name], ref)
        if (r["node"] in ("ours", "ours_kvi8s") and ref_step and r.get("seconds_per_step")
                and r.get("outcome") == "completed" and runs["reference"].get("outcome") == "completed"):
            same = r.get("env", {}).get("device") == runs["reference"].get("env", {}).get("device")
            r["ratio_vs_reference"] = round(r["seconds_per_step"] / ref_step, 3) if same else None
    return ok


def markdown(runs):
    for r in runs.values():
        r.setdefault("gpu", r.get("env", {}).get("device"))
    cols = ("name", "gpu", "node", "format", "blocks", "tokens", "fence_free_gib", "outcome",
            "seconds_per_step", "first_step_extra_s", "device_peak_gib", "host_peak_gib",
            "fallback_blocks", "bit_equal", "rel_rms_vs_exact", "rel_rms_vs_reference",
            "ratio_vs_reference")
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in runs.values():
        cells = []
        for c in cols:
            v = r.get(c)
            cells.append(f"{v:.4g}" if isinstance(v, float) else ("-" if v is None else str(v)))
        lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r['name']}: {r['outcome']}: {r.get('error', '')[:300]} at {r.get('where')}"
             for r in runs.values() if r.get("outcome") != "completed"]
    return "\n".join(lines + [""] + notes) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("history", help="the runs' records (JSON lines; the latest per name counts)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    runs = latest(args.history)
    ok = complete(runs)
    md = markdown(runs)
    print(md)
    if args.out:
        with open(os.path.join(args.out, "report.json"), "w") as f:
            json.dump(list(runs.values()), f, indent=1)
        with open(os.path.join(args.out, "report.md"), "w") as f:
            f.write(md)
    if not ok:
        print("report: a fenced exact run of ours is NOT bit-equal to the unfenced one")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
