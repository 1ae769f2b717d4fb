"""run_block computes ComfyUI's DiTBlock.forward: checked against a plain fp32
torch re-statement of the block (docs/H3_MODEL.md section 3) on bf16 weights. The
engine rounds to bf16 between steps and the reference does not, so they agree
to a tolerance, not bit for bit: measured 0.019 of the block update (bound
0.05), while a wrong piece is far outside (no SiLU: 2.3; (sin, cos) read as
(cos, sin): 0.25)."""

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from conftest import block_inputs, run_block, streamed_options


def rms(v, w, eps):
    return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + eps) * w


def modulate(h, shift, scale, runs):
    out = h.clone()
    for a, b, row in runs:
        out[a:b] = h[a:b] * (1 + scale[row]) + shift[row]
    return out


def gate_add(x, y, gate, runs):
    out = x.clone()
    for a, b, row in runs:
        out[a:b] = x[a:b] + y[a:b] * gate[row]
    return out


def reference_block(w, i, cfg, x, t_emb, runs, rope):
    p = f"blocks.{i}."
    g = lambda n: w[p + n].float()  # noqa: E731
    hidden, heads, hd, eps = cfg["hidden"], cfg["heads"], cfg["head_dim"], cfg["eps"]
    half = cfg["rope_dim"] // 2
    x = x.float()
    # AdalnProj: linear(SiLU(t_emb)) -> [M * 3, 6 * hidden] -> six vectors.
    mods = F.linear(F.silu(t_emb.float()), g("adaln_proj.linear.weight"), g("adaln_proj.linear.bias"))
    mods = mods.view(-1, 6 * hidden)
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = mods.chunk(6, dim=-1)
    h = modulate(rms(x, g("norm1.weight"), eps), shift_msa, scale_msa, runs)
    q, k, v = F.linear(h, g("attn.qkv_proj.weight")).split(heads * hd, dim=-1)
    c, s = rope[..., 0].float(), rope[..., 1].float()  # [S, half]

    def norm_rope(t, wn):
        t = rms(t.view(-1, heads, hd), wn, eps)
        a, b = t[..., :half], t[..., half:2 * half]
        cc, ss = c[:, None, :], s[:, None, :]
        return torch.cat([cc * a - ss * b, ss * a + cc * b, t[..., 2 * half:]], dim=-1)

    q = norm_rope(q, g("attn.q_norm.weight"))
    k = norm_rope(k, g("attn.k_norm.weight"))
    v = v.view(-1, heads, hd)
    o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1))
    o = F.linear(o.transpose(0, 1).reshape(-1, heads * hd), g("attn.out_proj.weight"))
    x = gate_add(x, o, gate_msa, runs)
    h2 = modulate(rms(x, g("norm2.weight"), eps), shift_mlp, scale_mlp, runs)
    gate, up = F.linear(h2, g("mlp.fc1.weight")).chunk(2, dim=-1)
    y = F.linear(F.silu(gate) * up, g("mlp.fc2.weight"))
    return gate_add(x, y, gate_mlp, runs)


@pytest.mark.parametrize("mode", ["stock", "streamed"])
def test_matches_a_torch_restatement_of_the_block(engine, checkpoint, mode):
    eng = engine("bf16")
    w = load_file(str(checkpoint("bf16")))
    x, t_emb, runs, rope = block_inputs(eng.config, 97, seed=12)
    out = run_block(eng, 1, (x, t_emb, runs, rope), mode,
                    streamed_options(q_chunk=13, kv_chunk=29, mlp_chunk=31))
    ref = reference_block(w, 1, eng.config, x, t_emb, runs, rope)
    delta = (ref - x.float()).norm()
    err = (out.float() - ref).norm() / delta
    assert delta > 0.1 * x.float().norm(), "the reference block barely changes x"
    assert err < 0.05, f"relative error of the block update {err:.4f}"
    # The same check fails for a wrong block (here: block 0's weights).
    wrong = reference_block(w, 0, eng.config, x, t_emb, runs, rope)
    assert (out.float() - wrong).norm() / delta > 0.2
