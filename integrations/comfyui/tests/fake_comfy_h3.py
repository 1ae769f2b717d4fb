"""A stand-in for ComfyUI's `comfy.ldm.minimax.model`, reduced to what the node touches:
a DiT block's modules under ComfyUI's names (whose weights the node casts and hands to
h3stream each call; the MLP half also runs, for mlp_chunk = 0) and the segment-wise
`_mod_scale_shift` / `_mod_gate`. Written here from docs/H3_MODEL.md section 3
(the arithmetic ComfyUI's block performs, bf16 with the roundings it lists) and
tests/python/test_reference.py's torch re-statement; no ComfyUI code. The weights come
from an H3 checkpoint's tensors under their file keys."""

import sys
import types

import torch
import torch.nn.functional as F
from torch import nn

BF16 = torch.bfloat16


def _mod_scale_shift(h, shift, scale, mod_segments):
    """Step 3 (and 8): per segment, bf16(bf16(h * bf16(1 + scale)) + shift), in bf16 ops."""
    out = torch.empty_like(h)
    for a, b, row in mod_segments:
        out[a:b] = h[a:b] * (1 + scale[row]) + shift[row]
    return out


def _mod_gate(x, gate, y, mod_segments):
    """Steps 7 and 11: x = bf16(x + y * gate), the sum in fp32 with one rounding."""
    out = torch.empty_like(x)
    for a, b, row in mod_segments:
        out[a:b] = (x[a:b].float() + y[a:b].float() * gate[row].float()).to(x.dtype)
    _mod_gate.calls += 1
    return out


_mod_gate.calls = 0


class RMSNorm(nn.Module):
    """Step 2: bf16(x * rstd * w), the product in fp32 and rounded once."""

    def __init__(self, weight, eps):
        super().__init__()
        self.weight = nn.Parameter(weight.to(BF16), requires_grad=False)
        self.eps = eps

    def forward(self, x):
        v = x.float()
        rstd = torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + self.eps)
        return (v * rstd * self.weight.float()).to(BF16)


def _linear(weight, bias=None):
    out_f, in_f = weight.shape
    lin = nn.Linear(in_f, out_f, bias=bias is not None, dtype=BF16)
    with torch.no_grad():
        lin.weight.copy_(weight.to(BF16))
        if bias is not None:
            lin.bias.copy_(bias.to(BF16))
    lin.requires_grad_(False)
    return lin


class AdalnProj(nn.Module):
    """Step 1, full time form: linear(SiLU(t_emb)) in bf16; output column
    modality * 6 * hidden + e * hidden + c, so [M, 18 hidden] viewed as [3 M, 6 hidden]
    has mod row t * 3 + modality; returns shift_msa, scale_msa, gate_msa, shift_mlp,
    scale_mlp, gate_mlp, each [3 M, hidden]."""

    def __init__(self, weight, bias, hidden):
        super().__init__()
        self.linear = _linear(weight, bias)
        self.hidden = hidden

    def forward(self, t_emb):
        mods = self.linear(F.silu(t_emb)).view(-1, 6 * self.hidden)
        return mods.chunk(6, dim=-1)


class Mlp(nn.Module):
    """Steps 9-10: f = fc1(h) (gate | up), y = fc2(bf16(SiLU(gate)) * up), bf16 eager."""

    def __init__(self, fc1, fc2):
        super().__init__()
        self.fc1 = _linear(fc1)
        self.fc2 = _linear(fc2)

    def forward(self, h):
        gate, up = self.fc1(h).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * up)


class Attention(nn.Module):
    """The attention's modules (their weights are what the node hands to h3stream; the
    attention itself runs in h3stream)."""

    def __init__(self, sd, p, eps):
        super().__init__()
        self.qkv_proj = _linear(sd[p + "attn.qkv_proj.weight"])
        self.out_proj = _linear(sd[p + "attn.out_proj.weight"])
        self.q_norm = RMSNorm(sd[p + "attn.q_norm.weight"], eps)
        self.k_norm = RMSNorm(sd[p + "attn.k_norm.weight"], eps)

    def forward(self, x, rope_freqs=None, transformer_options={}):
        """For tests that run the block in torch (the precision probe): ComfyUI's
        Attention.forward without the rope (per-head q/k RMSNorm, SDPA, out_proj)."""
        s, hd = x.shape[0], self.q_norm.weight.shape[0]
        inner = self.out_proj.weight.shape[1]
        q, k, v = self.qkv_proj(x).split(inner, dim=-1)
        q = self.q_norm(q.reshape(s, -1, hd)).transpose(0, 1)
        k = self.k_norm(k.reshape(s, -1, hd)).transpose(0, 1)
        v = v.reshape(s, -1, hd).transpose(0, 1)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.out_proj(out.transpose(0, 1).reshape(s, inner))


class Block(nn.Module):
    """DiT block `index` from bf16 checkpoint tensors, ComfyUI's module names."""

    def __init__(self, sd, index, hidden, eps):
        super().__init__()
        p = f"blocks.{index}."
        self.norm1 = RMSNorm(sd[p + "norm1.weight"], eps)
        self.norm2 = RMSNorm(sd[p + "norm2.weight"], eps)
        self.attn = Attention(sd, p, eps)
        self.adaln_proj = AdalnProj(sd[p + "adaln_proj.linear.weight"],
                                    sd[p + "adaln_proj.linear.bias"], hidden)
        self.mlp = Mlp(sd[p + "mlp.fc1.weight"], sd[p + "mlp.fc2.weight"])

    def forward(self, x, t_emb, mod_segments, rope_freqs, transformer_options={}):
        """ComfyUI's DiTBlock.forward, with the fake attention above."""
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = self.adaln_proj(t_emb)
        h = _mod_scale_shift(self.norm1(x), shift_msa, scale_msa, mod_segments)
        x = _mod_gate(x, gate_msa, self.attn(h, rope_freqs), mod_segments)
        h = _mod_scale_shift(self.norm2(x), shift_mlp, scale_mlp, mod_segments)
        return _mod_gate(x, gate_mlp, self.mlp(h), mod_segments)


class DiffusionModel(nn.Module):
    """What the node reads of ComfyUI's MiniMax-H3 diffusion model: `blocks[i]` (the MLP
    half's modules), the attributes its H3 check looks for, and state_dict(), which is
    the checkpoint's tensors under their file keys (what ComfyUI's model hands over)."""

    def __init__(self, sd, blocks, hidden, eps):
        super().__init__()
        self._sd = dict(sd)
        self.blocks = nn.ModuleList(Block(sd, i, hidden, eps) for i in range(blocks))
        for name in ("final_layer", "video_patch_proj", "audio_patch_proj", "rope"):
            setattr(self, name, nn.Module())

    def state_dict(self, *args, **kwargs):
        return dict(self._sd)


def install(monkeypatch):
    """Makes `from comfy.ldm.minimax.model import _mod_gate, _mod_scale_shift` find this
    module, and comfy.ops / comfy.model_management the casts of fake_comfy_ops, for the
    rest of the test (monkeypatch undoes it)."""
    import fake_comfy_ops

    fake_comfy_ops.install(monkeypatch)
    names = ["comfy", "comfy.ldm", "comfy.ldm.minimax"]
    for name in names:
        if name not in sys.modules:
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "comfy.ldm.minimax.model", sys.modules[__name__])
    monkeypatch.setattr(sys.modules["comfy"], "ldm", sys.modules["comfy.ldm"], raising=False)
    monkeypatch.setattr(sys.modules["comfy.ldm"], "minimax", sys.modules["comfy.ldm.minimax"],
                        raising=False)
    monkeypatch.setattr(sys.modules["comfy.ldm.minimax"], "model", sys.modules[__name__],
                        raising=False)
    _mod_gate.calls = 0
