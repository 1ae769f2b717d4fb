#!/usr/bin/env python3
"""`h3s forward` against ComfyUI's own MiniMaxH3Model.forward on the same
checkpoint and inputs (issue: the installable API and the real-input forward).

Per format: `h3s make-checkpoint` writes a tiny ComfyUI-format checkpoint and
`h3s make-inputs` an inputs file (text-to-video+audio, and image-to-video with a
keyframe, an odd latent width to exercise ComfyUI's padding); `h3s forward` runs
it streamed and --stock; ComfyUI loads the same checkpoint with its own loader and
runs MiniMaxH3Model.forward(x=[video, audio], timestep=model_sampling.timestep(sigma),
context, minimax_payload) with the payload extra_conds builds (audio_scale from
its model_sampling, seed, the keyframe). Reports streamed == stock (bits) and
h3s vs ComfyUI per output (rel-rms, ulps) against the block tolerance (1e-2).
Writes forward-check.json and forward-check.md to --out.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, os.path.join(REPO, "integrations", "comfyui"))
TOL_REL_RMS = 1e-2


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and bool(
        (a.contiguous().view(-1).view(torch_int(a)) == b.contiguous().view(-1).view(torch_int(b))).all())


def torch_int(t):
    import torch

    return {2: torch.int16, 4: torch.int32}[t.element_size()]


def comfy_forward(patcher, inputs, cond_aug, seed, torch):
    import comfy.model_management as mm

    mm.load_models_gpu([patcher])
    dm = patcher.model.diffusion_model
    ms = patcher.model.model_sampling
    dev = mm.get_torch_device()
    dtype = patcher.model.get_dtype_inference()
    video = inputs["video_latent"].to(dev)
    audio = inputs["audio_latent"].to(dev)
    context = inputs["context"].to(dev, dtype)
    timestep = ms.timestep(inputs["sigma"].float()).to(dev)
    # what extra_conds builds for a t2va / first-frame i2va sampling run
    payload = {"seed": seed, "audio_scale": float(ms.audio_scale)}
    if "cond_latent" in inputs:
        kf = {"latent": inputs["cond_latent"].to(dev), "resolved_frame_index": 0}
        payload.update(keyframes=[kf], cond_video_latents=[kf["latent"]],
                       visual_cond_noise_aug=cond_aug)
    to = dict(patcher.model_options.get("transformer_options", {}))
    with torch.inference_mode():
        v, a = dm([video, audio], timestep, context, transformer_options=to, minimax_payload=payload)
    return v.cpu(), a.cpu(), float(ms.audio_scale)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("comfy", help="a ComfyUI checkout with comfy/ldm/minimax")
    ap.add_argument("--h3s", default=os.path.join(REPO, "build", "tools", "h3s", "h3s"))
    ap.add_argument("--backend", default="cpu", help="h3s forward's backend: cpu or cuda")
    ap.add_argument("--cpu", action="store_true", help="ComfyUI on the CPU (bf16 compute forced)")
    ap.add_argument("--formats", default="bf16,int8")
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(REPO, "out", "forward-check")))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    from comfyui_e2e import setup_comfy

    setup_comfy(os.path.abspath(args.comfy), args.cpu)
    import comfy.model_management as mm
    import comfy.sd
    import torch
    from safetensors.torch import load_file
    from h3_compare import rel_rms, ulp_diff

    work = tempfile.mkdtemp(prefix="h3s-forward-check-")
    cases = {  # name: make-inputs flags
        "t2va": ["--latent-t", "3", "--latent-h", "16", "--latent-w", "13", "--audio-frames", "24",
                 "--text-len", "20", "--sigma", "0.7"],
        "i2va": ["--latent-t", "4", "--latent-h", "12", "--latent-w", "16", "--audio-frames", "16",
                 "--text-len", "12", "--cond-frames", "1", "--sigma", "0.35"],
    }
    report = {"backend": args.backend, "comfy_cpu": args.cpu, "tolerance_rel_rms": TOL_REL_RMS,
              "torch": torch.__version__, "results": []}
    seed, cond_aug = 3, 0.999
    for fmt in args.formats.split(","):
        ckpt = os.path.join(work, f"tiny_{fmt}.safetensors")
        run([args.h3s, "make-checkpoint", "--preset", "tiny", "--format", fmt, ckpt])
        opts = {"dtype": torch.bfloat16} if args.cpu else {}
        patcher = comfy.sd.load_diffusion_model(ckpt, model_options=opts)
        for case, flags in cases.items():
            inp = os.path.join(work, f"in_{fmt}_{case}.safetensors")
            run([args.h3s, "make-inputs", "--checkpoint", ckpt, "--output", inp, "--seed", "11"] + flags)
            ours = {}
            for mode in ("streamed", "stock"):
                out = os.path.join(work, f"out_{fmt}_{case}_{mode}.safetensors")
                extra = ["--stock"] if mode == "stock" else ["--q-chunk", "97", "--kv-chunk", "64",
                                                             "--mlp-chunk", "50", "--min-tokens", "0",
                                                             "--final-layer-chunk", "33",
                                                             "--merge-tail-below", "0"]
                j = json.loads(run([args.h3s, "forward", "--checkpoint", ckpt, "--inputs", inp,
                                    "--output", out, "--backend", args.backend, "--seed", str(seed),
                                    "--cond-noise-aug", str(cond_aug), "--json"] + extra))
                ours[mode] = (load_file(out), j)
            inputs = load_file(inp)
            cv, ca, audio_scale = comfy_forward(patcher, inputs, cond_aug, seed, torch)
            sv, sa = ours["streamed"][0]["video"], ours["streamed"][0]["audio"]
            tv, ta = ours["stock"][0]["video"], ours["stock"][0]["audio"]
            r = {"format": fmt, "case": case, "tokens": ours["stock"][1]["tokens"],
                 "comfy_audio_scale": audio_scale,
                 "streamed_equals_stock": same_bits(sv, tv) and same_bits(sa, ta),
                 "hashes": {m: ours[m][1]["output_hash"] for m in ours},
                 "shapes_match": list(cv.shape) == list(tv.shape) and list(ca.shape) == list(ta.shape),
                 "video": dict(ulp_diff(tv, cv), rel_rms=rel_rms(tv, cv)),
                 "audio": dict(ulp_diff(ta, ca), rel_rms=rel_rms(ta, ca))}
            r["pass"] = (r["streamed_equals_stock"] and r["shapes_match"] and audio_scale == 4.0
                         and r["video"]["rel_rms"] <= TOL_REL_RMS and r["audio"]["rel_rms"] <= TOL_REL_RMS)
            print(json.dumps({k: r[k] for k in ("format", "case", "tokens", "streamed_equals_stock", "pass")}
                             | {"video_rel_rms": r["video"]["rel_rms"], "audio_rel_rms": r["audio"]["rel_rms"]}),
                  flush=True)
            report["results"].append(r)
        del patcher
        mm.unload_all_models()
    report["pass"] = all(r["pass"] for r in report["results"])
    with open(os.path.join(args.out, "forward-check.json"), "w") as f:
        json.dump(report, f, indent=1)
    lines = [f"# h3s forward vs ComfyUI MiniMaxH3Model.forward ({args.backend}; ComfyUI "
             f"{'cpu' if args.cpu else 'gpu'})", "",
             "| format | case | tokens | streamed == stock | video rel-rms | audio rel-rms | video max ulp | audio max ulp | pass |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["results"]:
        lines.append(f"| {r['format']} | {r['case']} | {r['tokens']} | {r['streamed_equals_stock']} | "
                     f"{r['video']['rel_rms']:.2e} | {r['audio']['rel_rms']:.2e} | {r['video']['max_ulp']} | "
                     f"{r['audio']['max_ulp']} | {r['pass']} |")
    lines += ["", f"tolerance: rel-rms <= {TOL_REL_RMS} per output; pass: {report['pass']}"]
    with open(os.path.join(args.out, "forward-check.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
