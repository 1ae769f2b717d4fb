"""Bit-level comparison of two tensors in ulps of their own dtype (bf16, fp16,
fp32): the distance between the ordered integer encodings, so 0 ulp means
bit-identical. Streams over the tensors in slices (bounded extra memory even at
217k x 5376 values). Used by self_check and the end-to-end script.

Near zero a bf16 ulp is tiny, so two results that differ by 1e-30 around 0 are
thousands of ulps apart: read max_ulp together with p99_ulp and rel_rms."""

import torch

_INT = {torch.bfloat16: (torch.int16, 0x7FFF), torch.float16: (torch.int16, 0x7FFF),
        torch.float32: (torch.int32, 0x7FFFFFFF)}
SLICE = 1 << 24  # values per slice


def ordered(t):
    """Monotone integer image of a float tensor: a < b  <=>  ord(a) < ord(b); +0 and -0
    map to 0; one step between neighbours is one ulp (int32 for 16-bit types, int64 for fp32)."""
    it, mask = _INT[t.dtype]
    wide = torch.int32 if it == torch.int16 else torch.int64
    b = t.contiguous().view(it).to(wide)
    return torch.where(b < 0, -(b & mask), b)


def ulp_diff(a, b):
    """dict(count, max_ulp, mean_ulp, p99_ulp, differ, nan_mismatch, bit_equal) of a vs b.
    p99_ulp is an upper bound: the power of two bucket holding the 99th percentile."""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError(f"cannot compare {a.dtype}{list(a.shape)} with {b.dtype}{list(b.shape)}")
    fa = a.detach().reshape(-1)
    fb = b.detach().reshape(-1)
    if fb.device != fa.device:
        fb = fb.to(fa.device)
    n = fa.numel()
    mx, total, differ, nanmis = 0, 0, 0, 0
    hist = torch.zeros(66, dtype=torch.int64)  # bucket k: ulp distance in (2^(k-2), 2^(k-1)], 0: equal
    for lo in range(0, n, SLICE):
        sa, sb = fa[lo:lo + SLICE], fb[lo:lo + SLICE]
        na, nb = torch.isnan(sa), torch.isnan(sb)
        d = (ordered(sa) - ordered(sb)).abs().to(torch.int64)
        d = torch.where(na | nb, torch.zeros_like(d), d)
        nanmis += int((na != nb).sum().item())
        if d.numel():
            mx = max(mx, int(d.max().item()))
            total += int(d.sum().item())
            differ += int((d != 0).sum().item())
            bucket = torch.where(d == 0, torch.zeros_like(d),
                                 torch.ceil(torch.log2(d.double())).to(torch.int64) + 1)
            hist += torch.bincount(bucket.clamp(max=65).cpu(), minlength=66)
    p99 = 0
    if n:
        c = torch.cumsum(hist, 0)
        k = int(torch.searchsorted(c, torch.tensor(int(n * 0.99 + 0.999999))).item())
        p99 = 0 if k == 0 else 1 << (k - 1)
    return {"count": n, "max_ulp": mx, "mean_ulp": total / n if n else 0.0, "p99_ulp": p99,
            "differ": differ, "nan_mismatch": nanmis,
            "bit_equal": differ == 0 and nanmis == 0 and bool(torch.equal(
                fa.view(_INT[a.dtype][0]), fb.view(_INT[b.dtype][0])))}


def rel_rms(a, b):
    """||a - b|| / ||b|| accumulated in fp64 over slices (0 when both are zero)."""
    fa, fb = a.detach().reshape(-1), b.detach().reshape(-1).to(a.device)
    num = den = 0.0
    for lo in range(0, fa.numel(), SLICE):
        x, y = fa[lo:lo + SLICE].double(), fb[lo:lo + SLICE].double()
        num += float(((x - y) ** 2).sum().item())
        den += float((y ** 2).sum().item())
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return (num / den) ** 0.5


def describe(d):
    """One short phrase for a ulp_diff dict (plus rel_rms when present)."""
    if d["bit_equal"]:
        return f"bit-equal ({d['count']} values)"
    s = (f"max {d['max_ulp']} ulp, mean {d['mean_ulp']:.3g} ulp, p99 <= {d['p99_ulp']} ulp, "
         f"{d['differ']} of {d['count']} values differ")
    if "rel_rms" in d:
        s += f", rel-rms {d['rel_rms']:.2e}"
    return s
