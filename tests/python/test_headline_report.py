"""scripts/headline/report.py, the headline's side-by-side report, on synthetic runs: the
bit comparisons that must hold (and fail the report when they do not), kvi8s' rel-rms
against the exact store with or without the unfenced latent here, and the ratio to the
reference only between runs on the same GPU."""

import hashlib
import importlib.util
import json
import math
import pathlib

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load_report():
    spec = importlib.util.spec_from_file_location("headline_report",
                                                  ROOT / "scripts/headline/report.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


report = load_report()
CLIP = {"steps_asked": 1, "frames": 702, "width": 1376, "height": 768, "format": "int8"}


def latent(seed, bump=0.0):
    g = torch.Generator().manual_seed(seed)
    video = torch.randn(1, 16, 4, 6, 8, generator=g)
    audio = torch.randn(1, 8, 12, generator=g)
    return [video + bump, audio]


def run(tmp_path, name, node, tensors=None, device="H100", seconds=10.0, **extra):
    rec = {"name": name, "node": node, "outcome": "completed", "seconds_per_step": seconds,
           "env": {"device": device}, **CLIP, **extra}
    if tensors is not None:
        path = tmp_path / f"{name}.pt"
        torch.save(tensors, path)
        rec["latent_file"] = str(path)
        # (run.py hashes the tensors' bytes: equal bits, equal hashes)
        raw = b"".join(t.numpy().tobytes() for t in tensors)
        rec["latent_sha256"] = hashlib.sha256(raw).hexdigest()
        rec["latent_shapes"] = [list(t.shape) for t in tensors]
    return rec


def history(tmp_path, records):
    path = tmp_path / "headline.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_fenced_exact_equal_to_unfenced_passes(tmp_path):
    exact = latent(1)
    runs = {r["name"]: r for r in [
        run(tmp_path, "ours_unfenced", "ours", exact),
        run(tmp_path, "ours", "ours", [t.clone() for t in exact]),
    ]}
    assert report.complete(runs)
    assert runs["ours"]["bit_equal"] is True
    assert runs["ours"]["rel_rms_vs_exact"] == 0.0


def test_one_flipped_bit_fails_the_report(tmp_path):
    exact = latent(1)
    flipped = [t.clone() for t in exact]
    flipped[1].view(torch.int32).view(-1)[5] ^= 1  # the last mantissa bit of one audio value
    recs = [run(tmp_path, "ours_unfenced", "ours", exact), run(tmp_path, "ours", "ours", flipped)]
    runs = {r["name"]: r for r in recs}
    assert not report.complete(runs)
    assert runs["ours"]["bit_equal"] is False
    # main() reads the same records from the file and exits 1
    import sys
    argv, sys.argv = sys.argv, ["report.py", history(tmp_path, recs), "--out", str(tmp_path)]
    try:
        assert report.main() == 1
    finally:
        sys.argv = argv
    rows = [line for line in (tmp_path / "report.md").read_text().splitlines()
            if line.startswith("| ours |")]
    assert len(rows) == 1 and "| False |" in rows[0]


def test_other_clip_is_not_compared(tmp_path):
    # a two-step unfenced run against a one-step fenced one: no bits to compare, not a failure
    runs = {r["name"]: r for r in [
        run(tmp_path, "ours_unfenced", "ours", latent(1), steps_asked=2),
        run(tmp_path, "ours_15.0", "ours", latent(2)),
    ]}
    assert report.complete(runs)
    assert runs["ours_15.0"].get("bit_equal") is None


def test_hashes_compare_when_the_unfenced_latent_is_elsewhere(tmp_path):
    unfenced = run(tmp_path, "ours_unfenced", "ours", latent(1))
    del unfenced["latent_file"]  # on another machine: its hash and shapes travel
    same = run(tmp_path, "ours", "ours", latent(1))
    other = run(tmp_path, "ours_15.0", "ours", latent(2))
    runs = {"ours_unfenced": unfenced, "ours": same, "ours_15.0": other}
    assert not report.complete(runs)
    assert runs["ours"]["bit_equal"] is True
    assert runs["ours"]["bit_equal_to"] == "ours_unfenced (SHA-256)"
    # its own latent is here and the stand-in's (ours, the same hash) too: compared by bits
    assert runs["ours_15.0"]["bit_equal"] is False
    assert runs["ours_15.0"]["bit_equal_to"] == "ours_unfenced"


# x * c is rounded to fp32, 2^-24 |x c| at most, so rms(x c - x) / rms(x) is |1 - c| within
# 2^-24 |c| / |1 - c| of itself: 1e-5 relative covers c = 0.97 .. 1.03.
REL = 1e-5


def test_kvi8s_rel_rms_against_the_unfenced_exact_run(tmp_path):
    exact = latent(1)
    approx = [t * 1.01 for t in exact]  # rel-rms exactly 0.01 by definition
    runs = {r["name"]: r for r in [
        run(tmp_path, "ours_unfenced", "ours", exact),
        run(tmp_path, "ours_kvi8s", "ours_kvi8s", approx),
    ]}
    assert report.complete(runs)
    assert runs["ours_kvi8s"]["rel_rms_vs_exact"] == pytest.approx(0.01, rel=REL)
    assert "bit_equal" not in runs["ours_kvi8s"]


def test_kvi8s_rel_rms_against_a_fenced_stand_in(tmp_path):
    # a fresh machine ran ours and kvi8s, fenced; the unfenced run's record came from another
    exact = latent(1)
    unfenced = run(tmp_path, "ours_unfenced", "ours", exact)
    del unfenced["latent_file"]
    runs = {"ours_unfenced": unfenced,
            "ours": run(tmp_path, "ours", "ours", exact),
            "ours_kvi8s": run(tmp_path, "ours_kvi8s", "ours_kvi8s", [t * 0.98 for t in exact])}
    assert report.complete(runs)
    assert runs["ours"]["bit_equal"] is True
    assert runs["ours_kvi8s"]["rel_rms_vs_exact"] == pytest.approx(0.02, rel=REL)


def test_kvi8s_rel_rms_without_any_unfenced_record(tmp_path):
    exact = latent(3)
    runs = {"ours": run(tmp_path, "ours", "ours", exact),
            "ours_kvi8s": run(tmp_path, "ours_kvi8s", "ours_kvi8s", [t * 1.03 for t in exact])}
    assert report.complete(runs)
    assert runs["ours_kvi8s"]["rel_rms_vs_exact"] == pytest.approx(0.03, rel=REL)
    assert runs["ours_kvi8s"]["rel_rms_vs_exact_against"] == "ours"


def test_ratio_only_on_the_same_gpu(tmp_path):
    runs = {r["name"]: r for r in [
        run(tmp_path, "reference", "reference", latent(4), seconds=200.0),
        run(tmp_path, "ours", "ours", latent(5), seconds=130.0),
        run(tmp_path, "ours_kvi8s", "ours_kvi8s", latent(6), device="H200", seconds=100.0),
    ]}
    assert report.complete(runs)
    assert runs["ours"]["ratio_vs_reference"] == 0.65
    assert runs["ours_kvi8s"]["ratio_vs_reference"] is None
    want = math.sqrt(sum(float(((a.double() - b.double()) ** 2).sum())
                         for a, b in zip(latent(5), latent(4)))
                     / sum(float((b.double() ** 2).sum()) for b in latent(4)))
    assert runs["ours"]["rel_rms_vs_reference"] == pytest.approx(want, rel=1e-12)


def test_a_failed_run_is_named_in_the_markdown(tmp_path):
    runs = {"stock": {"name": "stock", "node": "stock", "outcome": "oom",
                      "error": "CUDA out of memory", "where": "block 3", **CLIP}}
    assert report.complete(runs)
    md = report.markdown(runs)
    assert "- stock: oom: CUDA out of memory at block 3" in md
