#!/usr/bin/env python3
"""Writes tests/data/golden/ck_nvfp4_weight.safetensors: NVFP4 weights quantised and
dequantised by comfy-kitchen's own PyTorch (CPU) code, the path ComfyUI runs.

Run from the repository root in a venv with torch (CPU is enough), safetensors and
comfy-kitchen 0.2.31 (`pip install --no-deps comfy-kitchen==0.2.31 packaging`):

    python tests/data/golden/make_nvfp4_golden.py [OUT]

comfy-kitchen is imported, never copied. Per case it calls
  - TensorCoreNVFP4Layout.quantize (ComfyUI's quantiser; ComfyUI's subclass in
    comfy/quant_ops.py computes the same global scale and calls the same
    comfy_kitchen.quantize_nvfp4), stored via TensorCoreNVFP4Layout.state_dict_tensors
    as ComfyUI saves a layer: weight, weight_scale, weight_scale_2;
  - QuantizedTensor(...).dequantize() with the Params ComfyUI's loader builds
    (comfy/ops.py: orig_dtype = compute dtype bf16): comfy_kitchen.dequantize_nvfp4 on
    the eager backend, bf16 arithmetic (`.deq_eager`);
  - comfy_kitchen.dequantize_nvfp4(..., torch.float32) cast once to bf16 (`.deq`):
    the arithmetic of comfy-kitchen's CUDA kernel (decode_scale = float(scale) * global
    in fp32, out = bf16(value * decode_scale)), which ComfyUI runs on a GPU with the
    CUDA backend enabled;
  - comfy_kitchen.float_utils.to_blocked on an index matrix (`.swizzle`): the
    block-scale swizzle itself.
The README next to this file says what each tensor pins down.
"""

import datetime
import importlib.metadata as md
import json
import sys

import torch
from safetensors.torch import save_file

import comfy_kitchen as ck
from comfy_kitchen.float_utils import fp4_x2_to_f32, from_blocked, to_blocked
from comfy_kitchen.tensor import QuantizedTensor, TensorCoreNVFP4Layout

CK_COMMIT = "7d86acf60c88fd6c3c733c0e54db22ef74b8d77f"  # Comfy-Org/comfy-kitchen, version 0.2.31
LEVELS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
E2M1_CODES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def bf16(x):
    return torch.as_tensor(x, dtype=torch.float32).to(torch.bfloat16)


def global_of(amax, master):
    """The global scale ComfyUI's quantiser computes for a master of dtype `master`."""
    return (torch.tensor(amax, dtype=master) / (448.0 * 6.0)).float()


def random_rows(gen, n, k):
    """Ordinary weights: per-row scale 10^U(-1, 1) * 0.02, normal / uniform / heavy
    tailed, 30% of rows with three x30 outliers."""
    w = torch.empty(n, k)
    for r in range(n):
        sigma = 0.02 * 10 ** (torch.rand(1, generator=gen).item() * 2 - 1)
        kind = r % 3
        if kind == 0:
            row = torch.randn(k, generator=gen)
        elif kind == 1:
            row = torch.rand(k, generator=gen) * 2 - 1
        else:
            row = torch.randn(k, generator=gen) / (torch.rand(k, generator=gen) + 0.05)
        if torch.rand(1, generator=gen).item() < 0.3:
            row[torch.randint(0, k, (3,), generator=gen)] *= 30
        w[r] = row * sigma
    return w.clamp(-0.4, 0.4)


def hard_rows(gen, k, g):
    """Rows that hit every e2m1 level, rounding ties, zeros and -0, e4m3-subnormal and
    underflowing block scales, a one-outlier block. `g` is the case's global scale
    (fp32); the block scale of a block whose maximum is 6 * t is e4m3(t / g)."""
    blocks = (k + 15) // 16
    rows = {}

    # levels: block b holds the 16 codes (rotated by b, so each level sits in even and
    # odd columns) times t = g * 2^e: block scale 2^e, codes exactly the levels.
    row = torch.zeros(k)
    for b in range(blocks):
        t = g * 2.0 ** ((b % 9) - 3)
        vals = torch.tensor(E2M1_CODES).roll(b) * t
        n = min(16, k - 16 * b)
        row[16 * b : 16 * b + n] = vals[:n]
    rows["levels"] = row

    # ties: the midpoints between neighbouring levels (round half to even), with 6 t as
    # the block maximum; exact in bf16 when g is a power of two.
    row = torch.zeros(k)
    mids = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0]
    for b in range(blocks):
        t = g * 2.0 ** ((b % 5) - 1)
        vals = torch.tensor(mids + [-m for m in mids]).roll(3 * b) * t
        n = min(16, k - 16 * b)
        row[16 * b : 16 * b + n] = vals[:n]
    rows["ties"] = row

    # zeros: block 0 all +-0 (a zero block); block 1 random with -0 and values far
    # below half a level (-> code 0 and code 8, "-0"); the rest +0.
    row = torch.zeros(k)
    row[1:16:3] = -0.0
    if blocks > 1:
        n = min(16, k - 16)
        blk = torch.randn(n, generator=gen) * g * 40
        blk[0:n:4] = -0.0
        blk[1:n:4] = -g * 0.5
        blk[2:n:4] = g * 0.5
        row[16 : 16 + n] = blk
    rows["zeros"] = row

    # outlier: one large value per block, the rest 1e-3 of it (-> codes 0 / 8 / 0.5).
    row = torch.randn(k, generator=gen) * g * 2
    for b in range(blocks):
        j = 16 * b + (5 * b) % min(16, k - 16 * b)
        row[j] = (1 if b % 2 == 0 else -1) * g * 6 * 300
    rows["outlier"] = row

    # tiny: block maxima 6 g 2^-e for e = 6..12: e4m3 normal, subnormal (2^-7..2^-9)
    # and underflowing (scale 0, every code 0) block scales.
    row = torch.zeros(k)
    for b in range(blocks):
        e = 6 + b % 7
        vals = torch.rand(16, generator=gen) * 2 - 1
        vals = vals / vals.abs().max() * 6 * g * 2.0 ** -e
        n = min(16, k - 16 * b)
        row[16 * b : 16 * b + n] = vals[:n]
    rows["tiny"] = row
    return rows


def make_case(name, n, k, amax, master, seed):
    gen = torch.Generator().manual_seed(seed)
    g = global_of(amax, master).item()
    w = random_rows(gen, n, k)
    hard = hard_rows(gen, k, g)
    order = ["levels", "ties", "zeros", "outlier", "tiny"]
    placed = {}
    for i, key in enumerate(order):
        r = 1 + i * max(1, (n - 2) // len(order))
        if r < n - 1:
            w[r] = hard[key]
            placed[key] = r
    # The tensor's amax: +amax at (0, 3) and -amax at (n-1, k-1) (two saturated
    # blocks: block scale min(amax / 6 / g, 448), codes clamped to +-6).
    w[0, min(3, k - 1)] = amax
    w[n - 1, k - 1] = -amax
    w = w.to(torch.bfloat16)
    assert w.float().abs().max().item() == amax, (name, w.float().abs().max().item(), amax)
    return w, placed


def quantise_and_dequantise(w, master):
    """ComfyUI's quantiser on the master (bf16, or its fp32 upcast), its stored tensors,
    and both dequantisations."""
    x = w.to(master)
    qdata, params = TensorCoreNVFP4Layout.quantize(x)
    stored = TensorCoreNVFP4Layout.state_dict_tensors(qdata, params)
    weight, weight_scale, weight_scale_2 = stored[""], stored["_scale"], stored["_scale_2"]
    # As comfy/ops.py builds the layer at load: Params(scale=weight_scale_2 (fp32),
    # block_scale=weight_scale (e4m3), orig_dtype=compute dtype, orig_shape).
    load_params = TensorCoreNVFP4Layout.Params(
        scale=weight_scale_2.to(torch.float32),
        block_scale=weight_scale.view(torch.float8_e4m3fn),
        orig_dtype=torch.bfloat16,
        orig_shape=tuple(w.shape),
    )
    deq_eager = QuantizedTensor(weight, "TensorCoreNVFP4Layout", load_params).dequantize()
    n, k = w.shape
    deq_f32 = ck.dequantize_nvfp4(weight, load_params.scale, load_params.block_scale, torch.float32)
    deq = deq_f32[:n, :k].to(torch.bfloat16)
    return weight, weight_scale, weight_scale_2, deq, deq_eager, deq_f32[:n, :k]


def swizzle_index(rows, blocks):
    """to_blocked applied to idx[r, c] = r * blocks + c + 1 (0 marks padding)."""
    idx = torch.arange(1, rows * blocks + 1, dtype=torch.int32).view(rows, blocks)
    return to_blocked(idx, flatten=False).contiguous()


def find_order_sensitive_amax():
    """A bf16 amax whose fp32 global g = amax / 2688 makes bf16((c * g) * s) and
    bf16(c * (s * g)) differ for some level c and e4m3 scale s: returns (amax, [(c, s)])."""
    c = torch.tensor(LEVELS[1:])
    s = torch.arange(1, 127, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    for bits in range(0x3F80, 0x4000):  # amax in [1, 2)
        amax = torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
        g = global_of(amax.float().item(), torch.float32)
        a = ((c[:, None] * g) * s[None, :]).to(torch.bfloat16).view(torch.int16)
        b = (c[:, None] * (s[None, :] * g)).to(torch.bfloat16).view(torch.int16)
        hits = (a != b).nonzero().tolist()
        # scales with room for 6 t below amax (s <= 448 / 2)
        hits = [(c[i].item(), s[j].item()) for i, j in hits if s[j].item() <= 224]
        if len(hits) >= 4:
            return amax.float().item(), hits
    raise RuntimeError("no order-sensitive global found")


def make_order_case(name, n, k, seed):
    """fp32 master (an fp32-precision global, as from a checkpoint quantised from an
    fp32 master or with our quantiser before it rounded the global to bf16): blocks
    built so that (level * global) * scale and level * (scale * global) round to
    different bf16 values."""
    amax, hits = find_order_sensitive_amax()
    g = global_of(amax, torch.float32).item()
    gen = torch.Generator().manual_seed(seed)
    w = random_rows(gen, n, k)
    blocks = k // 16
    j = 0
    for r in range(1, n - 1):
        for b in range(blocks):
            c, s = hits[j % len(hits)]
            j += 1
            t = s * g
            vals = torch.randn(16, generator=gen) * t * 0.7
            vals[0] = 6 * t  # block maximum: scale e4m3(6 t / 6 / g) = s
            vals[1:16:2] = torch.where(torch.arange(1, 16, 2) % 4 == 1, c * t, -c * t)
            w[r, 16 * b : 16 * b + 16] = vals.roll(b)
    w[0, 3] = amax
    w[n - 1, k - 1] = -amax
    w = w.to(torch.bfloat16)
    assert w.float().abs().max().item() == amax
    return w, amax, hits


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/golden/ck_nvfp4_weight.safetensors"
    # (name, N, K, tensor amax, master dtype, seed)
    cases = [
        ("n7_k16", 7, 16, 0.65625, torch.bfloat16, 1),  # amax 2688 * 2^-12: global 2^-12
        ("n40_k40", 40, 40, 0.65625, torch.bfloat16, 2),
        ("n130_k72", 130, 72, 1.2265625, torch.bfloat16, 3),
        ("n256_k64", 256, 64, 2.40625, torch.bfloat16, 4),
    ]
    tensors, info = {}, {"cases": {}}
    for name, n, k, amax, master, seed in cases:
        w, placed = make_case(name, n, k, amax, master, seed)
        info["cases"][name] = {"shape": [n, k], "master": "bf16", "amax": amax, "hard_rows": placed}
        tensors[name + ".w"] = w
        tensors.update(store(name, w, master, info["cases"][name]))

    name = "n32_k64_f32global"
    w, amax, hits = make_order_case(name, 32, 64, 5)
    tensors[name + ".w"] = w
    info["cases"][name] = {
        "shape": [32, 64],
        "master": "f32 (the bf16 .w upcast)",
        "amax": amax,
        "order_sensitive_level_scale_pairs": hits[:8],
    }
    tensors.update(store(name, w, torch.float32, info["cases"][name]))

    meta = {
        "producer": "h3stream golden generator tests/data/golden/make_nvfp4_golden.py "
        "(comfy-kitchen eager PyTorch backend on CPU)",
        "comfy_kitchen_version": md.version("comfy-kitchen"),
        "comfy_kitchen_commit": CK_COMMIT,
        "comfy_kitchen_backend": ",".join(
            b for b, v in ck.list_backends().items() if v["available"] and not v["disabled"]
        ),
        "torch": torch.__version__,
        "date": datetime.date.today().isoformat(),
        "calls": "quantise: comfy_kitchen.tensor.TensorCoreNVFP4Layout.quantize(x) -> "
        "comfy_kitchen.quantize_nvfp4(x, amax(|x|) / 2688 in x.dtype, pad_16x) "
        "[eager: backends.eager.quantization.quantize_nvfp4, float_utils.to_blocked]; stored "
        "via TensorCoreNVFP4Layout.state_dict_tensors. deq_eager: QuantizedTensor(weight, "
        "'TensorCoreNVFP4Layout', Params(scale=weight_scale_2, block_scale=weight_scale, "
        "orig_dtype=bf16, orig_shape)).dequantize() -> comfy_kitchen.dequantize_nvfp4(..., "
        "bf16) [eager]. deq: bf16(comfy_kitchen.dequantize_nvfp4(..., float32) [eager]). "
        "swizzle: float_utils.to_blocked(idx, flatten=False).",
        "info": json.dumps(info),
    }
    save_file({k: v.contiguous() for k, v in tensors.items()}, out, metadata=meta)
    print(json.dumps(info, indent=1))


def store(name, w, master, rec):
    weight, weight_scale, weight_scale_2, deq, deq_eager, deq_f32 = quantise_and_dequantise(w, master)
    n, k = w.shape
    np16, kp16 = weight.shape[0], weight.shape[1] * 2
    rec["stored"] = {
        "weight": list(weight.shape),
        "weight_scale": list(weight_scale.shape),
        "weight_scale_2": weight_scale_2.item(),
        "weight_scale_2_bits": "0x%08x" % weight_scale_2.view(torch.int32).item(),
    }
    # Diagnostics: how the three candidate dequantisation orders compare.
    g = weight_scale_2.float()
    vals = fp4_x2_to_f32(weight.contiguous())
    s = from_blocked(weight_scale.view(torch.float8_e4m3fn), np16, kp16 // 16).float()
    s = s.repeat_interleave(16, dim=1)
    cgs = ((vals * g) * s)[:n, :k].to(torch.bfloat16)
    rec["deq_vs_bf16((code*global)*scale)_mismatches"] = int(
        (cgs.view(torch.int16) != deq.view(torch.int16)).sum()
    )
    rec["deq_eager_vs_deq_mismatches"] = int((deq_eager.view(torch.int16) != deq.view(torch.int16)).sum())
    rec["deq_f32_exact_in_bf16"] = bool(torch.equal(deq.float(), deq_f32))
    codes = torch.stack([weight >> 4, weight & 15], dim=-1).view(np16, kp16)[:n, :k]
    rec["codes_used"] = sorted(set(codes.flatten().tolist()))
    return {
        name + ".qdata": weight,
        name + ".scale": weight_scale.view(torch.float8_e4m3fn),
        name + ".scale_2": weight_scale_2.to(torch.float32).reshape(()),
        name + ".deq": deq,
        name + ".deq_eager": deq_eager.contiguous(),
        name + ".swizzle": swizzle_index(np16, kp16 // 16),
    }


if __name__ == "__main__":
    main()
