#!/usr/bin/env python3
"""Is the node's final_layer_gemm=streamed bit-equal to the model's own final layer on
this GPU? cuBLAS picks its GEMM kernel by M, so only a measurement says.

Runs ChunkedFinalLayer (integrations/comfyui/nodes_streamed.py, imported as ComfyUI's
custom-node loader does; neither ComfyUI nor h3stream is needed) against the layer's
own forward at H3's head shapes: hidden 5376, video_out [96, 5376] and audio_out
[32, 5376] in fp32 with bias, a bf16 RMSNorm and adaLN, random weights. Spans with and
without a short tail, chunk 16384 (the default) and 4096, TF32 off and on, both GEMM
modes. Prints one JSON line per case: how many video and audio rows differ.

  usage: python3 scripts/final-layer-rows-check.py      (from the repository root)
  env:   PACK=DIR  another copy of the node pack (e.g. an older commit's) to compare
         DEV=cpu H=256  a small CPU run of the same cases (a smoke test of the script)
Measured on an H100 on 2026-12-05: bench/results/2026-12-05_h100_final_layer_rows.txt.
"""
import importlib
import importlib.util
import json
import os
import sys

import torch
from torch import nn

PACK = os.environ.get("PACK", "integrations/comfyui")
DEV = os.environ.get("DEV", "cuda")
HIDDEN = int(os.environ.get("H", "5376"))
SMALL = DEV == "cpu"
# (video rows, audio rows): no tail at 16384, and tails shorter than a chunk.
SPANS = ((2170, 200), (1003, 49)) if SMALL else ((217088, 20000), (100003, 4099))
CHUNKS = (160, 40) if SMALL else (16384, 4096)


def load_nodes_streamed():
    spec = importlib.util.spec_from_file_location(
        "h3s_pack", os.path.join(PACK, "__init__.py"), submodule_search_locations=[PACK])
    pack = importlib.util.module_from_spec(spec)
    sys.modules["h3s_pack"] = pack
    spec.loader.exec_module(pack)
    return importlib.import_module("h3s_pack.nodes_streamed")


class Final(nn.Module):
    """ComfyUI's H3 FinalLayer: the same expressions (tests/test_nodes_fake.py's FakeFinal)."""

    def __init__(self):
        super().__init__()
        self.norm = nn.RMSNorm(HIDDEN, eps=1e-6, dtype=torch.bfloat16)
        self.ada = nn.Linear(8, 2 * HIDDEN, dtype=torch.bfloat16)
        self.video_out = nn.Linear(HIDDEN, 96, dtype=torch.float32)
        self.audio_out = nn.Linear(HIDDEN, 32, dtype=torch.float32)

    def adaln_proj(self, t_emb):
        return self.ada(t_emb).chunk(2, dim=-1)

    def forward(self, x, t_emb, video_seg, audio_seg):
        shift, scale = self.adaln_proj(t_emb)
        va, vb, vr = video_seg
        aa, ab, ar = audio_seg
        hv = (self.norm(x[va:vb]) * (1.0 + scale[vr]) + shift[vr]).to(torch.float32)
        ha = (self.norm(x[aa:ab]) * (1.0 + scale[ar]) + shift[ar]).to(torch.float32)
        return self.video_out(hv), self.audio_out(ha)


def main():
    ns = load_nodes_streamed()
    torch.manual_seed(0)
    fl = Final().to(DEV)
    with torch.no_grad():
        for p in fl.parameters():
            p.normal_(0, 0.02)
    t = torch.randn(2, 8, dtype=torch.bfloat16, device=DEV)
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        for video, audio in SPANS:
            x = torch.randn(video + audio + 300, HIDDEN, dtype=torch.bfloat16, device=DEV)
            segs = ((300 + audio, 300 + audio + video, 1), (300, 300 + audio, 0))
            with torch.no_grad():
                ref = fl(x, t, *segs)
                for chunk in CHUNKS:
                    for gemm in ("streamed", "exact"):
                        got = ns.ChunkedFinalLayer(fl, chunk, gemm)(x, t, *segs)
                        rows = [int((g != r).any(dim=1).sum()) for g, r in zip(got, ref)]
                        print(json.dumps(dict(tf32=tf32, video=video, audio=audio, chunk=chunk,
                                              gemm=gemm, rows_differ_video_audio=rows)),
                              flush=True)
            del x
    name = torch.cuda.get_device_name() if DEV == "cuda" else "cpu"
    print(json.dumps(dict(torch=torch.__version__, device=name)))


if __name__ == "__main__":
    main()
