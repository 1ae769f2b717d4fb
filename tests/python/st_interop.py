#!/usr/bin/env python3
"""Interop between h3stream's safetensors code and the Python `safetensors` package.

Test-only helper, run by the CheckpointPython gtests (ctest python_safetensors_interop):

  st_interop.py write OUT [OUT_RAW]
      OUT: a file written with safetensors.numpy.save_file (F32, F16, F64, I8, I32,
      I64, U8, a scalar, an empty tensor, metadata). OUT_RAW: BF16 and F8_E4M3
      tensors, which numpy cannot hold, written through the package's own
      serializer from raw bytes.

  st_interop.py check IN
      IN: a tiny int8 checkpoint written by `h3s make-checkpoint`. Reads it with
      safetensors.safe_open(framework="numpy"), checks its layout and values, and
      prints a JSON digest {"metadata", "tensors": {name: {dtype, shape, byte_sum}},
      "checked_values"} for the gtest to compare with h3stream's own reader.
      Exits non-zero with a message on any problem.
"""

import json
import math
import struct
import sys

import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import save_file

# safetensors dtype -> numpy dtype, for the ones numpy can hold.
NUMPY_DTYPES = {
    "F64": np.float64,
    "F32": np.float32,
    "F16": np.float16,
    "I64": np.int64,
    "I32": np.int32,
    "I16": np.int16,
    "I8": np.int8,
    "U8": np.uint8,
    "BOOL": np.bool_,
}
ELEM_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
             "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}

INT8_QUANT = {"format": "int8_tensorwise", "convrot": True, "convrot_groupsize": 256}


def fail(msg):
    print(f"st_interop.py: {msg}", file=sys.stderr)
    sys.exit(1)


def write(out, out_raw=None):
    tensors = {
        "f32": (np.arange(12, dtype=np.float32) * 0.5 - 1.0).reshape(3, 4),
        "f16": np.array([1.5, -2.0, 65504.0, 2.0**-24], dtype=np.float16),
        "f64": np.array([0.1, -1e300], dtype=np.float64),
        "i8": np.array([-128, -1, 0, 127], dtype=np.int8),
        "i32": np.array([-70000, 0, 70000], dtype=np.int32),
        "i64": np.array([-(1 << 40), 7], dtype=np.int64),
        "scalar": np.array(3.25, dtype=np.float32),
        "empty": np.zeros((0, 5), dtype=np.float32),
        "layer.comfy_quant": np.frombuffer(json.dumps(INT8_QUANT).encode(), dtype=np.uint8).copy(),
    }
    save_file(tensors, out, metadata={"writer": "st_interop.py", "format": "pt"})
    if out_raw is None:
        return
    bf16 = np.array([0x3F80, 0xC000, 0x7F80, 0x0001], dtype=np.uint16)  # 1, -2, inf, min subnormal
    e4m3 = np.array([0x38, 0x40, 0x7E], dtype=np.uint8)  # 1, 2, 448
    raw = {"bf16": ("bfloat16", (2, 2), bf16), "e4m3": ("float8_e4m3fn", (3,), e4m3)}
    if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8
        specs = {k: safetensors.TensorSpec(dtype=d, shape=s, data_ptr=a.ctypes.data,
                                           data_len=a.nbytes)
                 for k, (d, s, a) in raw.items()}
    else:  # older releases take dicts of raw bytes
        specs = {k: {"dtype": d, "shape": list(s), "data": a.tobytes()}
                 for k, (d, s, a) in raw.items()}
    safetensors.serialize_file(specs, out_raw, metadata={"writer": "st_interop.py"})


def raw_header(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        fail(f"{path}: {len(blob)} bytes, too short")
    (n,) = struct.unpack("<Q", blob[:8])
    if n % 8 != 0:
        fail(f"{path}: header length {n} is not a multiple of 8")
    header = json.loads(blob[8:8 + n])
    return header, blob[8 + n:]


def check(path):
    header, data = raw_header(path)
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    # The data section is exactly the tensors, back to back in header order.
    spans = sorted((v["data_offsets"][0], v["data_offsets"][1], k) for k, v in entries.items())
    pos = 0
    for begin, end, name in spans:
        if begin != pos:
            fail(f"{path}: tensor '{name}' starts at {begin}, expected {pos}")
        pos = end
    if pos != len(data):
        fail(f"{path}: tensors end at {pos}, data section has {len(data)} bytes")

    digest = {"tensors": {}, "checked_values": 0}
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
        digest["metadata"] = metadata
        if metadata.get("h3stream_format") != "int8" or metadata.get("format") != "pt":
            fail(f"{path}: unexpected metadata {metadata}")
        keys = sorted(f.keys())
        if keys != sorted(entries):
            fail(f"{path}: safe_open keys differ from the header's")
        for name in keys:
            sl = f.get_slice(name)
            dtype, shape = sl.get_dtype(), list(sl.get_shape())
            h = entries[name]
            if dtype != h["dtype"] or shape != h["shape"]:
                fail(f"{path}: '{name}' is {dtype} {shape} in safe_open, {h['dtype']} "
                     f"{h['shape']} in the header")
            begin, end = h["data_offsets"]
            raw = data[begin:end]
            if len(raw) != math.prod(shape) * ELEM_SIZE[dtype]:
                fail(f"{path}: '{name}' has {len(raw)} bytes for {dtype} {shape}")
            if dtype in NUMPY_DTYPES:
                arr = f.get_tensor(name)
                if list(arr.shape) != shape or arr.dtype != NUMPY_DTYPES[dtype]:
                    fail(f"{path}: '{name}' loads as {arr.dtype} {arr.shape}")
                if arr.tobytes() != raw:
                    fail(f"{path}: '{name}' numpy bytes differ from the file's")
            digest["tensors"][name] = {"dtype": dtype, "shape": shape,
                                       "byte_sum": int(np.frombuffer(raw, np.uint8).sum(
                                           dtype=np.uint64))}

        # Values: every int8 layer's comfy_quant, weight and scales.
        for name in keys:
            if not name.endswith(".comfy_quant"):
                continue
            layer = name[: -len(".comfy_quant")]
            q = json.loads(bytes(f.get_tensor(name)).decode())
            if q != INT8_QUANT:
                fail(f"{path}: '{name}' is {q}, expected {INT8_QUANT}")
            w = f.get_tensor(layer + ".weight")
            s = f.get_tensor(layer + ".weight_scale")
            if w.dtype != np.int8 or w.ndim != 2 or w.shape[1] % 256 != 0:
                fail(f"{path}: '{layer}.weight' is {w.dtype} {w.shape}")
            if s.shape != (w.shape[0], 1) or s.dtype != np.float32:
                fail(f"{path}: '{layer}.weight_scale' is {s.dtype} {s.shape}")
            if not (np.isfinite(s).all() and (s > 0).all()):
                fail(f"{path}: '{layer}.weight_scale' has non-finite or non-positive values")
            if int(np.abs(w.astype(np.int32)).max()) == 0:
                fail(f"{path}: '{layer}.weight' is all zero")
            digest["checked_values"] += 1
        # BF16 norms via their raw bytes (numpy has no bfloat16): near 1, finite.
        for name in keys:
            if entries[name]["dtype"] == "BF16" and name.endswith("norm1.weight"):
                begin, end = entries[name]["data_offsets"]
                bits = np.frombuffer(data[begin:end], dtype="<u2").astype(np.uint32) << 16
                vals = bits.view(np.float32)
                if not (np.isfinite(vals).all() and abs(float(vals.mean()) - 1.0) < 0.1):
                    fail(f"{path}: '{name}' values look wrong (mean {vals.mean()})")
                digest["checked_values"] += 1
        inv = f.get_tensor("rope.inv_freq")
        if inv.dtype != np.float32 or not (inv[0] == 1.0 and np.all(np.diff(inv) < 0)):
            fail(f"{path}: rope.inv_freq is {inv}")
        digest["checked_values"] += 1
    print(json.dumps(digest))


def main(argv):
    if len(argv) >= 3 and argv[1] == "write" and len(argv) <= 4:
        write(argv[2], argv[3] if len(argv) == 4 else None)
    elif len(argv) == 3 and argv[1] == "check":
        check(argv[2])
    else:
        fail("usage: st_interop.py write OUT [OUT_RAW] | check IN")


if __name__ == "__main__":
    main(sys.argv)
