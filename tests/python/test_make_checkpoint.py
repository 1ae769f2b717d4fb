"""h3stream.make_checkpoint(weights="drawn"): the route of `h3s make-checkpoint --weights
drawn` (codes and scales drawn, streamed to disk), with the seeded file's keys, dtypes and
shapes, the same bytes for the same seed, and no .part file left behind."""

import json
import struct

import pytest

import h3stream

FORMATS = ["bf16", "int8", "w4a8", "nvfp4"]


def header(path):
    """The safetensors header: {name: (dtype, shape)} and the metadata."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        h = json.loads(f.read(n))
    metadata = h.pop("__metadata__", {})
    return {k: (v["dtype"], v["shape"]) for k, v in h.items()}, metadata


@pytest.mark.parametrize("fmt", FORMATS)
def test_drawn_file_has_the_seeded_keys_and_loads(tmp_path, fmt):
    drawn, seeded = tmp_path / "drawn.safetensors", tmp_path / "seeded.safetensors"
    h3stream.make_checkpoint(str(drawn), preset="tiny", format=fmt, blocks=1, seed=3,
                             weights="drawn")
    h3stream.make_checkpoint(str(seeded), preset="tiny", format=fmt, blocks=1, seed=3)
    drawn_tensors, drawn_md = header(drawn)
    seeded_tensors, seeded_md = header(seeded)
    assert drawn_tensors == seeded_tensors
    assert drawn_md["h3stream_weights"] == "drawn"
    assert "h3stream_weights" not in seeded_md
    assert sorted(p.name for p in tmp_path.iterdir()) == ["drawn.safetensors",
                                                          "seeded.safetensors"]
    h3stream.Engine.from_checkpoint(str(drawn), threads=2)


def test_drawn_bytes_follow_the_seed(tmp_path):
    paths = [tmp_path / f"{i}.safetensors" for i in range(3)]
    for path, seed in zip(paths, [5, 5, 6]):
        h3stream.make_checkpoint(str(path), format="int8", seed=seed, weights="drawn")
    a, b, c = (p.read_bytes() for p in paths)
    assert a == b
    assert a != c


def test_unknown_weights_are_refused(tmp_path):
    with pytest.raises(ValueError, match="weights 'sampled' is not valid: use 'seeded' or 'drawn'"):
        h3stream.make_checkpoint(str(tmp_path / "x.safetensors"), weights="sampled")
    assert not list(tmp_path.iterdir())
