"""mlp_chunk = 0 for real: the h3stream module (a CPU engine from a tiny bf16 checkpoint)
runs the attention half and the node's comfy_mlp_half runs the MLP half on torch modules
that restate ComfyUI's H3 block (fake_comfy_h3.py, weights from the same checkpoint).
Nothing is monkeypatched in the node; needs torch, safetensors and h3stream (a failure,
not a skip, under scripts/python-test.sh)."""

import sys

from conftest import load_pack, need

torch = need("torch")
h3stream = need("h3stream")
safetensors_torch = need("safetensors.torch")

import fake_comfy_h3  # noqa: E402  (imports torch)

SEQ = 97


def _inputs(cfg, seq, seed):
    """(x, t_emb, mod_segments, rope, rope_freqs): rope is the engine's (cos, sin) table
    and rope_freqs the same values as ComfyUI's [1, S, 1, rot/2, 2, 2] rotation table."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(seq, cfg["hidden"], generator=g).to(torch.bfloat16)
    t_emb = torch.randn(2, cfg["time_dim"], generator=g).to(torch.bfloat16)
    # text | audio | video over two timesteps: mod rows t * 3 + modality
    segs = [(0, 9, 1), (9, 30, 2), (30, 60, 0), (60, seq, 3)]
    ang = torch.rand(seq, cfg["rope_dim"] // 2, generator=g) * 50.0
    c, s = torch.cos(ang).to(torch.bfloat16), torch.sin(ang).to(torch.bfloat16)
    rope_freqs = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)[None, :, None]
    rope = torch.stack([c, s], -1).contiguous()
    return x, t_emb, segs, rope, rope_freqs


class _Base:
    def __init__(self, dm):
        self.diffusion_model = dm
        self.current_weight_patches_uuid = "w1"


class _Patcher:
    """The part of ComfyUI's ModelPatcher apply_streamed touches."""

    def __init__(self, model, options=None):
        self.model = model
        self.model_options = options if options is not None else {"transformer_options": {}}

    def clone(self):
        to = dict(self.model_options["transformer_options"])
        return _Patcher(self.model, {"transformer_options": to})

    def set_model_patch_replace(self, patch, name, block_name, number):
        to = self.model_options["transformer_options"]
        to.setdefault("patches_replace", {}).setdefault(name, {})[(block_name, number)] = patch


def _rms(t):
    return t.double().pow(2).mean().sqrt().item()


def test_mlp_chunk_zero_runs_the_models_own_mlp_half(tmp_path, monkeypatch):
    path = tmp_path / "tiny_bf16.safetensors"
    h3stream.make_checkpoint(str(path), preset="tiny", format="bf16", blocks=2, seed=7)
    sd = safetensors_torch.load_file(str(path))
    ref = h3stream.Engine.from_checkpoint(str(path), threads=2)  # h3stream's full block
    cfg = ref.config
    assert cfg["time_form"] == "full"

    fake_comfy_h3.install(monkeypatch)
    load_pack()
    ns = sys.modules["h3s_comfyui_pack.nodes_streamed"]
    ns.drop_engines()
    ns._said.clear()
    dm = fake_comfy_h3.DiffusionModel(sd, cfg["blocks"], cfg["hidden"], cfg["eps"])
    m = ns.apply_streamed(_Patcher(_Base(dm)),
                          {"min_tokens": 0, "mlp_chunk": 0, "final_layer_chunk": 0,
                           "trim_forward": False}, h3=h3stream)
    replace = m.model_options["transformer_options"]["patches_replace"]["dit"]

    def comfy_block(args):
        raise AssertionError("ComfyUI's own block ran: the node did not take the h3stream path")

    x, t_emb, segs, rope, rope_freqs = _inputs(cfg, SEQ, seed=5)
    for i in range(cfg["blocks"]):
        rep = replace[("double_block", i)]
        args = {"img": x.clone(), "t_emb": t_emb, "mod_segments": segs, "rope_freqs": rope_freqs,
                "transformer_options": {}}
        calls_before = fake_comfy_h3._mod_gate.calls
        node = rep(args, {"original_block": comfy_block})["img"]
        assert rep.last_path == "h3stream"
        assert fake_comfy_h3._mod_gate.calls == calls_before + 1, "the MLP half did not run"

        full, attn = x.clone(), x.clone()
        assert ref.run_block(i, full, t_emb, segs, rope, mode="stock") == "stock"
        assert ref.run_block(i, attn, t_emb, segs, rope, mode="stock", phases="attn") == "stock"
        mlp_update = _rms(full.double() - attn.double())
        rel_block = _rms(node.double() - full.double()) / _rms(full.double() - x.double())
        rel_mlp = _rms(node.double() - full.double()) / mlp_update
        rel_attn_only = _rms(node.double() - attn.double()) / mlp_update
        print(f"block {i}: node (h3stream attention + torch MLP half) vs h3stream full block: "
              f"rel-rms {rel_block:.3e} of the block update, {rel_mlp:.3e} of the MLP update; "
              f"node vs attention half only: {rel_attn_only:.3f} of the MLP update")
        assert mlp_update > 0.05 * _rms(x.double()), "the MLP half barely changes x here"
        # Measured on this checkpoint (seed 7, inputs seed 5), x86 CPU torch 2.x: rel_mlp
        # 2.0e-4 (block 0) and 6.3e-4 (block 1): torch's bf16 GEMMs and adaLN sum in other
        # orders than h3stream's fixed-order ones, so the two are close, not bit-equal.
        # Bound 3e-3, about 5x the larger measurement; a wrong piece is far outside
        # (measured: shift dropped 0.27, mod rows off by one 0.51, no MLP half 1.0).
        assert rel_mlp < 3e-3, rel_mlp
        # The MLP really ran: the node's output is the full block, not the attention half.
        assert rel_attn_only > 0.9, rel_attn_only
    eng = next(iter(ns._engines.values()))[1]
    # The node's engine holds the config only: every call brought its block's weights.
    assert not any(eng.block_loaded(i) for i in range(cfg["blocks"]))
    assert eng.weight_bytes == 0
