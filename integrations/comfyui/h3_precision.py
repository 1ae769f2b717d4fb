"""Activation statistics and simulated activation formats for the H3 Precision Probe.

Everything here is plain torch, computed in float32 on the activation's device, with
memory bounded by working in row chunks (CHUNK_ELEMS elements per temporary).

Formats (each one quantises and dequantises an activation; the probe reports the relative
rms error ||x - Q(x)|| / ||x|| it adds, over a segment's sampled rows):

- "int8": per-row absmax int8 (scale = row absmax / 127, round half to even, clamp to
  [-128, 127]); no rotation. Shown for reference: what ConvRot's rotation buys.
- "int8_convrot": comfy-kitchen's int8 ConvRot activation path (int8_linear with
  convrot=True): rotate each group of 256 columns by the normalised *regular* Hadamard
  matrix comfy-kitchen builds (Kronecker powers of the 4x4 regular Hadamard matrix
  [[1,1,1,-1],[1,1,-1,1],[1,-1,1,1],[-1,1,1,1]], divided by sqrt(256)), per-row int8 as
  above, dequantise, rotate back. Needs a column count divisible by 256 (every H3
  projection input is: 5376 = 21 x 256, 14336 = 56 x 256); otherwise None.
- "fp8_e4m3": per-row scaled float8 e4m3 (scale = row absmax / 448, values cast to
  torch.float8_e4m3fn, round to nearest even).
- "nvfp4": NVFP4 as comfy-kitchen's quantize_nvfp4 does it: e2m1 values
  {0, 0.5, 1, 1.5, 2, 3, 4, 6} with one e4m3 scale per 16 consecutive elements of a row and
  one float32 per-tensor scale = tensor absmax / (448 * 6), so that every block scale
  (block absmax / 6 / per-tensor scale) fits e4m3 (at most 448). The block scale is rounded
  to e4m3, the scaled values are clamped to [-6, 6] and rounded to the nearest e2m1 value
  (ties to even). "Tensor" is the projection's whole input (every row of every segment), as
  a kernel quantising that GEMM's input would see it. Columns are zero-padded to a
  multiple of 16 (padding adds no error).
- "nvfp4_h16": NVFP4 after a Hadamard-16 rotation: each group of 16 columns (exactly one
  NVFP4 block) rotated by the normalised regular Hadamard-16 (the same construction as
  ConvRot's, 4 x 4 Kronecker squared; 16 is the NVFP4 block, and 128 is not a power of 4,
  so a regular Hadamard-128 does not exist), NVFP4 with the rotated tensor's absmax as its
  per-tensor scale, rotated back.

The rotations are orthonormal, so the error measured after rotating back equals the error
in the rotated basis.
"""

import math

import torch

CHUNK_ELEMS = 1 << 23        # elements per float32 temporary (32 MiB)
CONVROT_GROUP = 256
NVFP4_BLOCK = 16
HADAMARD_NVFP4 = 16
E4M3_MAX = 448.0
E2M1_MAX = 6.0
FORMATS = ("int8", "int8_convrot", "fp8_e4m3", "nvfp4", "nvfp4_h16")
TOP_OUTLIERS = 8
# Modality tag of a mod row (docs/H3_MODEL.md section 3: mod row = t_index * 3 + modality,
# modality 0 video, 1 text, 2 audio; ComfyUI's AdalnProj views [M, 3 * 6 * hidden] as
# [3 M, 6 * hidden], and _forward's seg_tag gives text 1, video / cond / ref_img 0,
# audio / cond_audio / ref_audio 2).
MODALITY = {0: "video", 1: "text", 2: "audio"}
SEGMENTS = ("text", "audio", "video")  # report order (the packed order of the targets)

_cache = {}


def _const(key, device, make):
    k = (key, str(device))
    t = _cache.get(k)
    if t is None:
        t = _cache[k] = make().to(device)
    return t


def hadamard(n, device="cpu"):
    """The normalised regular Hadamard matrix of size n (a power of 4), float32, as
    comfy-kitchen's ConvRot builds it (int8_utils._build_hadamard). Symmetric and
    orthonormal: h @ h == identity."""
    if n < 4 or n & (n - 1) or (n.bit_length() - 1) % 2:
        raise ValueError(f"a regular Hadamard matrix needs a power of 4, got {n}")

    def make():
        h4 = torch.tensor([[1, 1, 1, -1], [1, 1, -1, 1], [1, -1, 1, 1], [-1, 1, 1, 1]],
                          dtype=torch.float32)
        h = h4
        while h.shape[0] < n:
            h = torch.kron(h, h4)
        return h / math.sqrt(n)
    return _const(("hadamard", n), device, make)


def rotate(x, h):
    """x [R, C] times the block-diagonal matrix diag(h, h, ...) (groups of h's size)."""
    g = h.shape[0]
    r, c = x.shape
    return (x.reshape(r, c // g, g) @ h).reshape(r, c)


def _pad_cols(x, multiple):
    c = x.shape[1]
    pad = -c % multiple
    return torch.nn.functional.pad(x, (0, pad)) if pad else x


def fake_int8_rowwise(x):
    """Per-row absmax int8, dequantised (comfy-kitchen's quantize_int8_rowwise)."""
    scale = (x.abs().amax(dim=1, keepdim=True) / 127.0).clamp(min=1e-30)
    return torch.round(x / scale).clamp(-128.0, 127.0) * scale


def fake_int8_convrot(x, group=CONVROT_GROUP):
    """int8 ConvRot: rotate groups of `group` columns, per-row int8, dequantise, rotate
    back. None when the column count is not a multiple of `group`."""
    if x.shape[1] % group:
        return None
    h = hadamard(group, x.device)
    return rotate(fake_int8_rowwise(rotate(x, h)), h.T)


def fake_fp8_rowwise(x):
    """Per-row scaled float8 e4m3, dequantised."""
    scale = (x.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp(min=1e-30)
    q = (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)
    return q * scale


def round_e2m1(v):
    """v (already within [-6, 6]) rounded to the nearest e2m1 value, ties to even. The
    e2m1 grid is uniform within each binade: step 0.5 below 2, 1 in [2, 4), 2 in [4, 6],
    so torch.round (half to even) at that step is the format's round-to-nearest-even."""
    a = v.abs()
    q = torch.where(a < 2.0, torch.round(a * 2.0) * 0.5,
                    torch.where(a < 4.0, torch.round(a), torch.round(a * 0.5) * 2.0))
    return torch.copysign(q, v)


def nvfp4_tensor_scale(amax):
    """NVFP4's per-tensor (global) scale for a tensor of absolute maximum amax."""
    return amax / (E4M3_MAX * E2M1_MAX)


def fake_nvfp4(x, amax):
    """NVFP4 (16-element blocks, e4m3 block scales, per-tensor scale from amax, the
    absolute maximum of the whole tensor x belongs to), dequantised. x [R, C], C a
    multiple of 16. The same arithmetic as comfy-kitchen's eager quantize_nvfp4 /
    dequantize_nvfp4."""
    r, c = x.shape
    pts = nvfp4_tensor_scale(torch.as_tensor(amax, dtype=torch.float32, device=x.device))
    b = x.reshape(r, c // NVFP4_BLOCK, NVFP4_BLOCK)
    block_amax = b.abs().amax(dim=-1)
    safe_pts = torch.where(pts == 0, torch.ones_like(pts), pts)
    block_scale = (block_amax / E2M1_MAX / safe_pts).clamp(max=E4M3_MAX)
    block_scale = block_scale.to(torch.float8_e4m3fn).to(torch.float32)
    total = (pts * block_scale).unsqueeze(-1)
    zero = total == 0
    v = torch.where(zero, torch.zeros_like(b), b / torch.where(zero, torch.ones_like(total), total))
    v = round_e2m1(v.clamp(-E2M1_MAX, E2M1_MAX))
    return (v * total).reshape(r, c)


def fake_nvfp4_h16(x, amax_rotated):
    """NVFP4 after a Hadamard-16 rotation of each 16-element block, rotated back;
    amax_rotated is the absolute maximum of the whole rotated tensor."""
    h = hadamard(HADAMARD_NVFP4, x.device)
    return rotate(fake_nvfp4(rotate(x, h), amax_rotated), h.T)


def swiglu(y):
    """fc2's input from fc1's output: silu(gate) * up, in y's dtype (ComfyUI's
    comfy.ops._swiglu_eager, the activation MLP.forward folds into fc2's call)."""
    gate, up = y.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up


# -- segments -----------------------------------------------------------------------
def _row_runs(a, b, row):
    """[(begin, end, mod_row)] of one segment: its row is an int, or (ComfyUI with a
    partial denoise mask) one integer mod-row index per token, split into runs of equal
    rows. Raises ValueError for any other row (e.g. a blend of rows)."""
    if isinstance(row, int) or (torch.is_tensor(row) and row.dim() == 0):
        return [(a, b, int(row))]
    if torch.is_tensor(row) and row.dim() == 1 and row.numel() == b - a and \
            not row.is_floating_point() and row.dtype != torch.bool:
        change = (row[1:] != row[:-1]).nonzero().flatten().add(1).tolist()
        starts, values = [0] + change, [int(row[0])] + row[1:][row[1:] != row[:-1]].tolist()
        return [(a + s, a + e, int(v)) for s, e, v in zip(starts, starts[1:] + [b - a], values)]
    raise ValueError(f"mod_segments row {type(row).__name__} over [{a}, {b}) is neither an int "
                     "nor one integer index per token")


def modality_runs(mod_segments, rows):
    """{segment name: [(begin, end), ...]} from a block's mod_segments ((begin, end,
    mod_row) runs covering the packed sequence; a row may be one index per token): the
    modality is mod_row % 3 (see MODALITY). Text-span runs the model modulates as video
    (vision pads) count as video, keyframe cond rows as video, reference / cond audio as
    audio: each row lands where the model's own modulation puts it. Without segments
    every row is one segment "all"."""
    runs, mod_rows = {}, {}
    for a, b, seg_row in mod_segments or ():
        a, b = int(a), int(b)
        if b <= a:
            continue
        for lo, hi, row in _row_runs(a, b, seg_row):
            name = MODALITY[row % 3]
            spans = runs.setdefault(name, [])
            if spans and spans[-1][1] == lo:
                spans[-1] = (spans[-1][0], hi)  # per-token rows of one modality: one run
            else:
                spans.append((lo, hi))
            mod_rows.setdefault(name, set()).add(row)
    if not runs:
        return {"all": [(0, rows)]}, {"all": []}
    order = [s for s in SEGMENTS if s in runs]
    return ({s: runs[s] for s in order}, {s: sorted(mod_rows[s]) for s in order})


def sample_rows(ranges, max_rows, device="cpu"):
    """Row indices (int64, on `device`, built there: no host-to-device copy) of at most
    max_rows rows spread evenly over the concatenation of `ranges`: position i * n // k for
    i < k (deterministic)."""
    rows = torch.cat([torch.arange(a, b, device=device) for a, b in ranges])
    n = rows.numel()
    k = min(int(max_rows), n)
    if k >= n:
        return rows
    return rows[torch.arange(k, device=device) * n // k]


# -- measurement ----------------------------------------------------------------------
def _chunks(n, cols):
    step = max(1, CHUNK_ELEMS // max(cols, 1))
    for lo in range(0, n, step):
        yield lo, min(lo + step, n)


def _rows(x, transform, lo, hi, index=None):
    part = x[lo:hi] if index is None else x[index[lo:hi]]
    if transform is not None:
        part = transform(part)
    return part.to(torch.float32)


def measure(x, mod_segments, max_rows=4096, transform=None):
    """Statistics of one projection input per segment.

    x: the tensor the projection consumes ([rows, channels]; any dtype and device), or the
    tensor `transform` turns into it row by row (fc1's output -> swiglu -> fc2's input).
    Returns a list of (segment, info, vector): info holds host values (rows, sampled rows,
    mod rows, channels); vector is one float32 tensor on x's device (no host sync here) with
    absmax, rms, median channel absmax, NVFP4's per-tensor absmax and its rotated
    counterpart, one relative error per FORMATS entry (NaN: not applicable), then the top
    outlier channels: indices, their absmax, their ratio to the median (NaN where there
    are fewer channels). unpack() turns it into a record.

    Abs-max, RMS and the channel statistics cover every row of the segment (read in row
    chunks); the errors cover at most max_rows rows per segment, evenly spaced."""
    x = x.reshape(-1, x.shape[-1])
    rows = x.shape[0]
    dev = x.device
    probe_cols = _rows(x, transform, 0, 1).shape[1]
    runs, mod_rows = modality_runs(mod_segments, rows)
    h16 = hadamard(HADAMARD_NVFP4, dev)
    acc = torch.float32 if dev.type == "mps" else torch.float64  # sums (MPS has no float64)

    # pass 1: every row -> per-channel absmax, sum of squares, rotated absmax
    stats = {}
    for seg, ranges in runs.items():
        chan = torch.zeros(probe_cols, dtype=torch.float32, device=dev)
        sumsq = torch.zeros((), dtype=acc, device=dev)
        rot_amax = torch.zeros((), dtype=torch.float32, device=dev)
        n = 0
        for a, b in ranges:
            for lo, hi in _chunks(b - a, probe_cols):
                part = _rows(x, transform, a + lo, a + hi)
                torch.maximum(chan, part.abs().amax(dim=0), out=chan)
                sumsq += torch.sum(part * part, dtype=acc)
                rot = rotate(_pad_cols(part, HADAMARD_NVFP4), h16)
                rot_amax = torch.maximum(rot_amax, rot.abs().amax())
                n += hi - lo
        stats[seg] = (chan, sumsq, rot_amax, n)
    tensor_amax = torch.stack([s[0].amax() for s in stats.values()]).amax()
    tensor_rot_amax = torch.stack([s[2] for s in stats.values()]).amax()

    out = []
    for seg, ranges in runs.items():
        chan, sumsq, _, n = stats[seg]
        absmax = chan.amax()
        rms = torch.sqrt(sumsq / (n * probe_cols)).to(torch.float32)
        median = chan.median()
        k = min(TOP_OUTLIERS, probe_cols)
        ratio = chan / torch.where(median > 0, median, torch.ones_like(median))
        top_ratio, top_idx = torch.topk(ratio, k)
        top = torch.full((3, TOP_OUTLIERS), float("nan"), device=dev)
        top[0, :k] = top_idx.to(torch.float32)
        top[1, :k] = chan[top_idx]
        top[2, :k] = torch.where(median > 0, top_ratio, torch.full_like(top_ratio, float("inf")))

        # pass 2: the sampled rows -> error of each format
        index = sample_rows(ranges, max_rows, dev)
        err = torch.zeros(len(FORMATS), dtype=acc, device=dev)
        ref = torch.zeros((), dtype=acc, device=dev)
        convrot_ok = probe_cols % CONVROT_GROUP == 0
        for lo, hi in _chunks(index.numel(), probe_cols):
            part = _pad_cols(_rows(x, transform, lo, hi, index), NVFP4_BLOCK)
            ref += torch.sum(part * part, dtype=acc)
            for i, f in enumerate(FORMATS):
                if f == "int8":
                    q = fake_int8_rowwise(part)
                elif f == "int8_convrot":
                    if not convrot_ok:
                        continue
                    q = fake_int8_convrot(part[:, :probe_cols])
                    q = _pad_cols(q, NVFP4_BLOCK)
                elif f == "fp8_e4m3":
                    q = fake_fp8_rowwise(part)
                elif f == "nvfp4":
                    q = fake_nvfp4(part, tensor_amax)
                else:
                    q = fake_nvfp4_h16(part, tensor_rot_amax)
                d = part - q
                err[i] += torch.sum(d * d, dtype=acc)
                del q, d
        rel = torch.sqrt(err / torch.where(ref > 0, ref, torch.ones_like(ref))).to(torch.float32)
        if not convrot_ok:
            rel[FORMATS.index("int8_convrot")] = float("nan")
        vec = torch.cat([torch.stack([absmax, rms, median, tensor_amax, tensor_rot_amax]),
                         rel, top.reshape(-1)])
        info = {"segment": seg, "rows": n, "sampled_rows": int(index.numel()),
                "mod_rows": mod_rows[seg], "channels": probe_cols}
        out.append((seg, info, vec))
    return out


def _num(v):
    return None if v != v or v in (float("inf"), float("-inf")) else float(v)


def unpack(info, values):
    """A JSON-ready record from measure()'s info and its vector as a list of floats."""
    rec = dict(info)
    rec.update(absmax=_num(values[0]), rms=_num(values[1]),
               median_channel_absmax=_num(values[2]), nvfp4_tensor_absmax=_num(values[3]),
               nvfp4_h16_tensor_absmax=_num(values[4]))
    base = 5
    for i, f in enumerate(FORMATS):
        rec[f"rel_err_{f}"] = _num(values[base + i])
    top = values[base + len(FORMATS):]
    t = TOP_OUTLIERS
    rec["outliers"] = [{"channel": int(top[j]), "absmax": _num(top[t + j]),
                        "ratio": _num(top[2 * t + j]) if top[2 * t + j] != float("inf") else None}
                       for j in range(t) if top[j] == top[j]]
    return rec
