#!/usr/bin/env python3
"""End-to-end check of the ComfyUI node pack inside a real ComfyUI checkout.

For each weight format: write a tiny synthetic H3 checkpoint (h3stream.make_checkpoint,
the same file as `h3s make-checkpoint --preset tiny`), load it with ComfyUI's own
loader (comfy.sd.load_diffusion_model: detection, quantised ops, comfy-kitchen
tensors), load integrations/comfyui through ComfyUI's custom-node loader, and run
the model's forward (MiniMaxH3Model.forward, the call the sampler makes) on fixed
random latents:

  comfy      ComfyUI's own blocks (stock PyTorch / comfy-kitchen path)
  ours       h3stream's stock block through the node (whole sequence everywhere)
  default    "H3 Streamed Blocks" with the default controls + self_check
  awkward    q_chunk 1024, kv_chunk 3072, mlp_chunk 2048 + self_check
  kv_block   kv_block 1024, final_layer_gemm streamed
  mlp0       mlp_chunk 0 (the model's own MLP module runs the second half)
  probe      "H3 Memory Probe" around the default node (JSONL + HTML timeline)

and reports: every streamed run == ours, bit for bit, per block and for the final
outputs; ours vs comfy per block on identical block inputs (ulps, rel-rms) and for the
final outputs; mlp0 vs ours; the self_check lines; the guarded import (a
subprocess where h3stream cannot load prints exactly one line and loads the other
nodes). Writes comfyui-e2e.json and comfyui-e2e.md (and the probe's files) to --out.

Stubs (documented in docs/COMFYUI.md): PyAV ('av') is replaced by an empty
import-time stub because ComfyUI's `nodes` imports comfy_api's video types, which
the model path never uses. On a CPU run ComfyUI would compute in fp32 (it treats
bf16 as unsupported on CPU); --cpu forces its bf16 compute path so both sides run
the bf16 arithmetic that a GPU run does.
"""

import argparse
import asyncio
import importlib.abc
import importlib.machinery
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
import types

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACK = os.path.join(REPO, "integrations", "comfyui")

# bf16 block outputs of two correct implementations (different GEMM, attention and
# norm reduction orders) on identical inputs: the tolerance this report states.
TOL_BLOCK_REL_RMS = 1e-2
TOL_FINAL_REL_RMS = 5e-2


# -- ComfyUI environment ----------------------------------------------------------
class _AvStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import-time stand-in for PyAV ('av' and 'av.*'); any use raises."""

    def find_spec(self, name, path, target=None):
        if name == "av" or name.startswith("av."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        m = types.ModuleType(spec.name)
        m.__path__ = []

        class Unavailable:
            def __init__(self, *a, **k):
                raise RuntimeError("PyAV is stubbed in the h3stream ComfyUI e2e")

        def getattr_(attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            return Unavailable

        m.__getattr__ = getattr_
        return m

    def exec_module(self, module):
        pass


def setup_comfy(comfy_dir, cpu, extra_args=()):
    try:
        import av  # noqa: F401
        stubbed = False
    except ImportError:
        sys.meta_path.insert(0, _AvStub())
        stubbed = True
    sys.path.insert(0, comfy_dir)
    sys.argv = [os.path.join(comfy_dir, "main.py")] + (["--cpu"] if cpu else []) + list(extra_args)
    import comfy.options

    comfy.options.enable_args_parsing()
    if not cpu:
        # PyTorch's allocator as main.py picks it before torch touches CUDA: with a CUDA 13
        # torch, backend:cudaMallocAsync (the driver's stream-ordered pool), unless
        # --disable-cuda-malloc
        import cuda_malloc  # noqa: F401
    import comfy.model_management as mm

    if cpu:  # ComfyUI runs fp32 on CPU; the bf16 path is what a GPU runs
        mm.should_use_bf16 = lambda *a, **k: True
    import comfy.sd  # noqa: F401
    import nodes

    return nodes, stubbed


def load_pack(nodes):
    ok = asyncio.run(nodes.load_custom_node(PACK))
    wanted = ["H3StreamedBlocks", "H3MemoryProbe", "H3PrecisionProbe", "H3FreeCache",
              "H3EvictTextEncoder"]
    found = {k: k in nodes.NODE_CLASS_MAPPINGS for k in wanted}
    return ok, found


def kitchen_info():
    """(comfy-kitchen version, names of its usable backends)."""
    try:
        from importlib.metadata import version

        kver = version("comfy-kitchen")
    except Exception as e:
        return f"missing ({e})", "-"
    try:
        import comfy_kitchen as ck

        kb = ck.list_backends()
        kb = [n for n, v in kb.items() if v.get("available") and not v.get("disabled")]
    except Exception as e:
        kb = f"? ({type(e).__name__}: {e})"
    return kver, kb


FILE_INPUTS = {"unet_name", "clip_name", "vae_name"}  # lists of files in models/: not checked


def validate_workflow(nodes, comfy_dir, path):
    """The example workflow against the real node definitions: every class exists, every
    required input is given, combo values are options, numbers are in range."""
    h3_nodes = os.path.join(comfy_dir, "comfy_extras", "nodes_minimax_h3.py")
    if "MiniMaxH3ImageToVideo" not in nodes.NODE_CLASS_MAPPINGS and os.path.exists(h3_nodes):
        asyncio.run(nodes.load_custom_node(h3_nodes, module_parent="comfy_extras"))
    with open(path) as f:
        wf = json.load(f)
    problems = []
    for nid, node in wf.items():
        ct = node["class_type"]
        cls = nodes.NODE_CLASS_MAPPINGS.get(ct)
        if cls is None:
            problems.append(f"{nid}: no node class {ct}")
            continue
        spec = cls.INPUT_TYPES()
        for name, (typ, *rest) in spec.get("required", {}).items():
            opts = rest[0] if rest else {}
            if name not in node["inputs"]:
                problems.append(f"{nid} {ct}: required input {name} missing")
                continue
            v = node["inputs"][name]
            if isinstance(v, list) and len(v) == 2 and isinstance(v[0], str):
                continue  # a link
            if isinstance(typ, list) and name not in FILE_INPUTS and v not in typ:
                problems.append(f"{nid} {ct}: {name}={v!r} not in {typ[:8]}")
            if typ in ("INT", "FLOAT") and not (opts.get("min", v) <= v <= opts.get("max", v)):
                problems.append(f"{nid} {ct}: {name}={v} outside {opts.get('min')}..{opts.get('max')}")
        known = set(spec.get("required", {})) | set(spec.get("optional", {}))
        for name in node["inputs"]:
            if name not in known:
                problems.append(f"{nid} {ct}: unknown input {name}")
    return {"workflow": os.path.relpath(path, REPO), "nodes": len(wf), "problems": problems,
            "pass": not problems}


def pack_module(name):
    """A submodule of the pack as ComfyUI's loader named it (the folder path, '.' -> '_x_')."""
    return sys.modules[PACK.replace(".", "_x_") + "." + name]


def guarded_import_check(comfy_dir):
    """A child ComfyUI where `import h3stream` fails: one console line, three nodes."""
    code = f"""
import sys, asyncio, io, contextlib
sys.meta_path.insert(0, type("Block", (), {{
    "find_spec": staticmethod(lambda name, path, target=None:
        (_ for _ in ()).throw(ImportError("blocked by the e2e guarded-import check"))
        if name == "h3stream" or name.startswith("h3stream.") else None)}})())
sys.path.insert(0, {REPO!r}); sys.path.insert(0, {os.path.join(REPO, "scripts")!r})
import comfyui_e2e
nodes, _ = comfyui_e2e.setup_comfy({comfy_dir!r}, cpu=True)
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    ok, found = comfyui_e2e.load_pack(nodes)
lines = [l for l in buf.getvalue().splitlines() if l.strip()]
import json
print("RESULT " + json.dumps({{"loaded": ok, "found": found, "lines": lines}}))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
            res["one_line"] = len(res["lines"]) == 1 and "[h3stream]" in res["lines"][0]
            res["others_loaded"] = all(v for k, v in res["found"].items() if k != "H3StreamedBlocks")
            res["streamed_absent"] = not res["found"]["H3StreamedBlocks"]
            res["pass"] = res["one_line"] and res["others_loaded"] and res["streamed_absent"]
            return res
    return {"pass": False, "error": (r.stdout + r.stderr)[-2000:]}


# -- capturing block outputs --------------------------------------------------------
class Capture:
    """Outermost block wrapper: keeps each block's output (and optionally runs
    ComfyUI's original block on a copy of the same input for a per-block diff)."""

    def __init__(self, index, store, inner, compare_comfy):
        self.index, self.store, self.inner, self.compare = index, store, inner, compare_comfy

    def __call__(self, args, extra):
        from h3_compare import rel_rms, ulp_diff

        ref = None
        if self.index == 0 and self.compare:
            self.store["inputs0"] = {"x_in": args["img"].clone(), "t_emb": args["t_emb"],
                                     "mod_segments": list(args["mod_segments"]),
                                     "rope_freqs": args["rope_freqs"]}
        if self.compare:
            ref_args = dict(args)
            ref_args["img"] = args["img"].clone()
            ref = extra["original_block"](ref_args)["img"]
        out = self.inner(args, extra) if self.inner is not None else extra["original_block"](args)
        y = out["img"]
        self.store.setdefault("blocks", {})[self.index] = y.detach().clone()
        if self.index == 0 and "inputs0" in self.store:
            self.store["inputs0"]["img"] = self.store["inputs0"].pop("x_in")
        self.store.setdefault("paths", {})[self.index] = getattr(self.inner, "last_path", "comfy")
        if ref is not None:
            d = ulp_diff(y, ref)
            d["rel_rms"] = rel_rms(y, ref)
            self.store.setdefault("vs_comfy", {})[self.index] = d
        return out


def mlp_half_check(dm, inp, torch):
    """mlp_chunk 0 hands the second half of each block to the model's own modules
    (nodes_streamed.comfy_mlp_half): ComfyUI's attention half followed by it must give
    ComfyUI's DiTBlock.forward bit for bit."""
    from comfy.ldm.minimax.model import _mod_gate, _mod_scale_shift

    if inp is None:
        return {"pass": False, "error": "no block-0 inputs captured"}
    half = pack_module("nodes_streamed").comfy_mlp_half
    blk = dm.blocks[0]
    x, t, segs, rope = inp["img"], inp["t_emb"], inp["mod_segments"], inp["rope_freqs"]
    with torch.inference_mode():
        ref = blk(x.clone(), t, segs, rope)
        y = x.clone()
        shift_msa, scale_msa, gate_msa = blk.adaln_proj(t)[:3]
        h = _mod_scale_shift(blk.norm1(y), shift_msa, scale_msa, segs)
        y = _mod_gate(y, gate_msa, blk.attn(h, rope_freqs=rope), segs)
        y = half(blk, y, t, segs)
    return {"pass": bool(torch.equal(y, ref)), "what": "ComfyUI attention half + comfy_mlp_half "
            "== DiTBlock.forward on block 0"}


def with_capture(patcher, store, compare_comfy=False):
    m = patcher.clone()
    to = m.model_options.setdefault("transformer_options", {})
    replace = to.get("patches_replace", {}).get("dit", {})
    for i in range(len(m.model.diffusion_model.blocks)):
        m.set_model_patch_replace(Capture(i, store, replace.get(("double_block", i)), compare_comfy),
                                  "dit", "double_block", i)
    return m


def forward(patcher, inputs, torch):
    import comfy.model_management as mm

    mm.load_models_gpu([patcher])
    dm = patcher.model.diffusion_model
    to = dict(patcher.model_options.get("transformer_options", {}))
    sync = torch.cuda.synchronize if inputs["device"].type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    with torch.inference_mode():
        v, a = dm([inputs["video"], inputs["audio"]], inputs["timestep"], inputs["context"],
                  transformer_options=to, minimax_payload={})
    sync()
    return v.clone(), a.clone(), time.perf_counter() - t0


# -- one format ----------------------------------------------------------------------
def make_inputs(torch, cfg, dev, dtype, dims, seed=7):
    T, H, W, Ta, L = dims
    g = torch.Generator("cpu").manual_seed(seed)
    video = torch.randn(1, cfg["video_latent"], T, H, W, generator=g).to(dev, dtype)
    audio = torch.randn(1, cfg["audio_latent"], 2, Ta, generator=g).to(dev, dtype)
    context = (torch.randn(1, L, cfg["text_dim"], generator=g) * 0.5).to(dev, dtype)
    timestep = torch.tensor([0.7 * 1000.0], device=dev)
    tokens = L + 2 * Ta + T * ((H + 1) // 2) * ((W + 1) // 2)
    return {"video": video, "audio": audio, "context": context, "timestep": timestep,
            "device": torch.device(dev), "tokens": tokens}


def run_format(fmt, args, nodes, torch, log_lines):
    import comfy.model_management as mm
    import comfy.sd
    import h3stream
    from h3_compare import rel_rms, ulp_diff

    streamed_mod = pack_module("nodes_streamed")
    nodes_memory = pack_module("nodes_memory")
    node_cls = nodes.NODE_CLASS_MAPPINGS["H3StreamedBlocks"]
    probe_cls = nodes.NODE_CLASS_MAPPINGS["H3MemoryProbe"]
    res = {"format": fmt}
    ckpt = os.path.join(args.ckpt_dir, f"tiny_{fmt}.safetensors")
    if not os.path.exists(ckpt):
        os.makedirs(args.ckpt_dir, exist_ok=True)
        h3stream.make_checkpoint(ckpt, preset="tiny", format=fmt)
    res["checkpoint"] = {"path": ckpt, "bytes": os.path.getsize(ckpt)}
    opts = {"dtype": torch.bfloat16} if args.cpu else {}
    patcher = comfy.sd.load_diffusion_model(ckpt, model_options=opts)
    base, dm = patcher.model, patcher.model.diffusion_model
    blk = dm.blocks[0]
    res["detected"] = {
        "model_class": type(base).__name__, "config_class": type(base.model_config).__name__,
        "diffusion_model": type(dm).__name__, "blocks": len(dm.blocks),
        "hidden": dm.hidden_size, "heads": blk.attn.heads, "head_dim": blk.attn.head_dim,
        "dtype": str(base.get_dtype_inference()),
        "qkv_weight": type(blk.attn.qkv_proj.weight).__name__,
        "qkv_layout": getattr(blk.attn.qkv_proj, "layout_type", None),
        "qkv_quant_format": getattr(blk.attn.qkv_proj, "quant_format", None),
    }
    cfg = {"video_latent": dm.latents_dim, "audio_latent": dm.audio_latents_dim,
           "text_dim": dm.condition_proj.weight.shape[1]}
    dev = mm.get_torch_device()
    inputs = make_inputs(torch, cfg, dev, base.get_dtype_inference(), args.dims)
    S = inputs["tokens"]
    res["tokens"] = S
    # Every control but the model is optional (a saved workflow keeps loading as controls
    # are added): the defaults are the optional inputs' defaults.
    spec = node_cls.INPUT_TYPES()
    node_inputs = {**spec["required"], **spec.get("optional", {})}
    defaults = {c: v[1]["default"] for c, v in node_inputs.items() if c != "model"}
    base_ctl = dict(defaults)
    if args.min_tokens is not None:
        base_ctl["min_tokens"] = args.min_tokens
    runs = {
        "default": dict(base_ctl, self_check=True),
        "awkward": dict(base_ctl, q_chunk=1024, kv_chunk=3072, mlp_chunk=2048, self_check=True),
        "kv_block": dict(base_ctl, kv_block=1024, final_layer_gemm="streamed"),
        "mlp0": dict(base_ctl, mlp_chunk=0),
    }
    if args.quick:
        runs["awkward"].update(q_chunk=1024, kv_chunk=1024, mlp_chunk=1024)

    out = {}
    # ComfyUI stock; block 0's qkv_proj input (the activation comfy-kitchen quantises) kept
    # for the quantiser comparison below.
    st, qkv_in = {}, {}
    hook = blk.attn.qkv_proj.register_forward_pre_hook(
        lambda mod, a_: qkv_in.setdefault("h", a_[0].detach().clone()))
    try:
        v, a, secs = forward(with_capture(patcher, st), inputs, torch)
    finally:
        hook.remove()
    out["comfy"] = (v, a, st, secs)
    # h3stream stock through the node; per block also ComfyUI's block on the same input
    st = {}
    ours_ctl = dict(base_ctl, final_layer_chunk=0, min_tokens=0)
    m = streamed_mod.apply_streamed(patcher, ours_ctl, mode="stock")
    v, a, secs = forward(with_capture(m, st, compare_comfy=True), inputs, torch)
    out["ours"] = (v, a, st, secs)
    for name, ctl in runs.items():
        st = {}
        n0 = len(log_lines)
        (m,) = node_cls().patch(patcher, **ctl)
        v, a, secs = forward(with_capture(m, st), inputs, torch)
        out[name] = (v, a, st, secs)
        res.setdefault("logs", {})[name] = log_lines[n0:]

    ov, oa, ost, _ = out["ours"]
    res["runs"] = {}
    for name, (v, a, st, secs) in out.items():
        r = {"seconds": round(secs, 4), "paths": [st.get("paths", {}).get(i) for i in range(len(dm.blocks))]}
        if name in runs:
            r["controls"] = {k: runs[name][k] for k in ("q_chunk", "kv_chunk", "mlp_chunk", "min_tokens",
                                                         "kv_block", "final_layer_chunk", "final_layer_gemm",
                                                         "self_check")}
        if name != "ours":
            r["final_vs_ours"] = {"video": ulp_diff(v, ov), "audio": ulp_diff(a, oa)}
            r["final_vs_ours"]["video"]["rel_rms"] = rel_rms(v, ov)
            r["final_vs_ours"]["audio"]["rel_rms"] = rel_rms(a, oa)
            r["blocks_vs_ours"] = {i: ulp_diff(st["blocks"][i], ost["blocks"][i]) for i in st.get("blocks", {})}
            for i, d in r["blocks_vs_ours"].items():
                d["rel_rms"] = rel_rms(st["blocks"][i], ost["blocks"][i])
            r["bit_equal_to_ours"] = (all(d["bit_equal"] for d in r["blocks_vs_ours"].values())
                                      and r["final_vs_ours"]["video"]["bit_equal"]
                                      and r["final_vs_ours"]["audio"]["bit_equal"])
        res["runs"][name] = r
    res["ours_vs_comfy_per_block"] = {i: d for i, d in ost.get("vs_comfy", {}).items()}
    worst_block = max((d["rel_rms"] for d in res["ours_vs_comfy_per_block"].values()), default=0.0)
    fin = res["runs"]["comfy"]["final_vs_ours"]
    worst_final = max(fin["video"]["rel_rms"], fin["audio"]["rel_rms"])
    res["tolerance"] = {"block_rel_rms_max": TOL_BLOCK_REL_RMS, "final_rel_rms_max": TOL_FINAL_REL_RMS,
                        "block_rel_rms": worst_block, "final_rel_rms": worst_final,
                        "pass": worst_block <= TOL_BLOCK_REL_RMS and worst_final <= TOL_FINAL_REL_RMS}
    res["streamed_bit_equal"] = {n: res["runs"][n]["bit_equal_to_ours"] for n in ("default", "awkward", "kv_block")}
    res["self_check_lines"] = [l for name in runs for l in res["logs"][name] if "self_check" in l]
    res["mlp_half"] = mlp_half_check(dm, out["ours"][2].get("inputs0"), torch)

    # memory probe around the default node
    (m,) = node_cls().patch(patcher, **runs["default"])
    pm, rec = nodes_memory.attach_probe(m, args.out, f"memory-probe-{fmt}")
    forward(pm, inputs, torch)
    rec.flush(wait=True)
    with open(rec.jsonl_path) as f:
        recs = [json.loads(l) for l in f]
    res["probe"] = {"jsonl": os.path.basename(rec.jsonl_path), "html": os.path.basename(rec.html_path),
                    "records": len(recs), "phases": sorted({r["phase"] for r in recs}),
                    "paths": sorted({r.get("path") for r in recs if r.get("path")})}
    res["quantiser"] = quantiser_check(fmt, qkv_in.get("h"), torch)
    del patcher, m, pm, base, dm, blk, out
    mm.unload_all_models()
    return res


def quantiser_check(fmt, h, torch):
    """int8: comfy-kitchen's CUDA ConvRot quantiser (the kernels ComfyUI's int8 linear calls)
    vs h3stream.convrot_quantize on block 0's real qkv_proj input, bit for bit."""
    import h3stream
    if fmt != "int8":
        return "n/a (not an int8 model)"
    if h is None:
        return "not measured: block 0's qkv_proj input was not captured"
    x = h.reshape(-1, h.shape[-1]).contiguous()
    q_ours, s_ours = h3stream.convrot_quantize(x)
    if not x.is_cuda:
        return f"not measured: CPU run ({x.shape[0]} rows quantised by h3stream only)"
    from comfy_kitchen.backends import cuda as ck_cuda
    res = {"rows": int(x.shape[0]), "k": int(x.shape[1])}
    for name in ("quantize_int8_rowwise_convrot64", "quantize_int8_rowwise_convrot"):
        fn = getattr(ck_cuda, name, None)
        if fn is None:
            res[name] = "absent"
            continue
        q_ck, s_ck = fn(x, 256)
        torch.cuda.synchronize()
        q_ck, s_ck = q_ck.cpu(), s_ck.reshape(-1).cpu()
        res[name] = {"q_differ": int((q_ck != q_ours).sum()),
                     "scale_bits_differ": int((s_ck.view(torch.int32) != s_ours.view(torch.int32)).sum())}
    res["pass"] = all(isinstance(v, dict) and v["q_differ"] == 0 and v["scale_bits_differ"] == 0
                      for k, v in res.items() if k.startswith("quantize"))
    return res


def _fmt_d(d):
    if d["bit_equal"]:
        return "bit-equal"
    return (f"max {d['max_ulp']} ulp, mean {d['mean_ulp']:.3g} ulp, p99 <= {d['p99_ulp']} ulp, "
            f"rel-rms {d.get('rel_rms', 0):.2e}")


def markdown(report):
    L = [f"# ComfyUI end-to-end: {report['when']}", "",
         f"- machine: {report['env']['device']}; torch {report['env']['torch']}; python {report['env']['python']}",
         f"- ComfyUI {report['env']['comfyui']}; comfy-kitchen {report['env']['comfy_kitchen']} "
         f"(backends available: {report['env']['kitchen_backends']}); h3stream {report['env']['h3stream']} "
         f"(cuda {report['env']['h3stream_cuda']})",
         f"- node pack loaded through ComfyUI's load_custom_node: {report['pack']['loaded']}, nodes {report['pack']['found']}",
         f"- guarded import (h3stream blocked in a child ComfyUI): pass {report['guarded_import'].get('pass')}; "
         f"console: {report['guarded_import'].get('lines')}",
         f"- example workflow checked against the node definitions: pass {report['workflow'].get('pass')} "
         f"{report['workflow'].get('problems') or ''}",
         f"- PyAV stubbed: {report['env']['av_stubbed']}", ""]
    for r in report["formats"]:
        d = r["detected"]
        L += [f"## {r['format']}: {r['tokens']} tokens, {d['blocks']} blocks", "",
              f"ComfyUI detected {d['model_class']} ({d['config_class']}), hidden {d['hidden']}, "
              f"{d['heads']} heads x {d['head_dim']}, compute {d['dtype']}, qkv weight {d['qkv_weight']} "
              f"{d['qkv_quant_format'] or ''} {d['qkv_layout'] or ''}", "",
              "| run | controls | blocks via | seconds | vs h3stream stock: blocks | final video | final audio |",
              "|---|---|---|---|---|---|---|"]
        for name, x in r["runs"].items():
            ctl = x.get("controls")
            ctl_s = "-" if not ctl else ", ".join(f"{k} {v}" for k, v in ctl.items())
            if "blocks_vs_ours" in x:
                b = "; ".join(f"{i}: {_fmt_d(dd)}" for i, dd in x["blocks_vs_ours"].items())
                fv, fa = _fmt_d(x["final_vs_ours"]["video"]), _fmt_d(x["final_vs_ours"]["audio"])
            else:
                b, fv, fa = "(reference)", "", ""
            L.append(f"| {name} | {ctl_s} | {', '.join(str(p) for p in x['paths'])} | {x['seconds']} | {b} | {fv} | {fa} |")
        L += ["", "h3stream stock vs ComfyUI's block on identical block inputs: " + "; ".join(
            f"block {i}: {_fmt_d(dd)}" for i, dd in r["ours_vs_comfy_per_block"].items()),
              f"tolerance (stated): block rel-rms <= {r['tolerance']['block_rel_rms_max']}, final rel-rms <= "
              f"{r['tolerance']['final_rel_rms_max']}: pass {r['tolerance']['pass']}",
              f"streamed == h3stream stock bit for bit: {r['streamed_bit_equal']}",
              f"int8 quantiser bits: {r['quantiser']}",
              f"mlp_chunk 0 second half (the model's own modules) == ComfyUI's block: {r['mlp_half']}",
              f"memory probe: {r['probe']}", "", "self_check lines:", ""]
        L += [f"    {l}" for l in r["self_check_lines"]] + [""]
    return "\n".join(L)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("comfy", help="path to a ComfyUI checkout that has comfy/ldm/minimax")
    ap.add_argument("--formats", default="int8,bf16")
    ap.add_argument("--out", default=os.environ.get("OUT", os.path.join(REPO, "out", "comfyui-e2e")))
    ap.add_argument("--ckpt-dir", default=None)
    ap.add_argument("--cpu", action="store_true", help="run ComfyUI with --cpu (bf16 compute forced)")
    ap.add_argument("--quick", action="store_true", help="small sizes for a CPU run")
    ap.add_argument("--min-tokens", type=int, default=None, help="override min_tokens of every node run")
    ap.add_argument("--dims", default=None, help="T,H,W,audio_T,text_len of the latents")
    args = ap.parse_args()
    args.comfy = os.path.abspath(args.comfy)
    os.makedirs(args.out, exist_ok=True)
    # not under --out: a device call brings back at most 8 files of 16 MiB from $OUT
    args.ckpt_dir = args.ckpt_dir or os.path.join(tempfile.gettempdir(), "h3s-e2e-ckpt")
    if args.dims:
        args.dims = tuple(int(v) for v in args.dims.split(","))
    else:  # device: 37,056 packed tokens (> the default min_tokens 32768); quick: 2,580
        args.dims = (4, 50, 50, 32, 16) if args.quick else (9, 128, 128, 64, 64)
    if args.quick and args.min_tokens is None:
        args.min_tokens = 0

    sys.path.insert(0, PACK)  # h3_compare for the captures
    nodes, stubbed = setup_comfy(args.comfy, args.cpu)
    import torch

    log_lines = []

    class Keep(logging.Handler):
        def emit(self, record):
            log_lines.append(record.getMessage())

    lg = logging.getLogger("h3stream.comfyui")
    lg.addHandler(Keep())
    lg.setLevel(logging.INFO)
    ok, found = load_pack(nodes)
    import h3stream

    kver, kb = kitchen_info()
    sys.path.insert(0, args.comfy)
    try:
        import comfyui_version
        cver = comfyui_version.__version__
    except Exception:
        cver = "?"
    report = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "env": {"python": platform.python_version(), "torch": torch.__version__,
                "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() and not args.cpu else "cpu",
                "comfyui": cver, "comfy_kitchen": kver, "kitchen_backends": str(kb),
                "h3stream": h3stream.__version__, "h3stream_cuda": h3stream.has_cuda(),
                "av_stubbed": stubbed},
        "pack": {"loaded": ok, "found": found},
        "args": {k: v for k, v in vars(args).items()},
    }
    report["guarded_import"] = guarded_import_check(args.comfy)
    try:
        report["workflow"] = validate_workflow(
            nodes, args.comfy, os.path.join(PACK, "workflows", "h3_long_pass_streamed_api.json"))
    except Exception as e:
        report["workflow"] = {"pass": False, "problems": [f"{type(e).__name__}: {e}"]}
    report["formats"] = []
    for fmt in args.formats.split(","):
        try:
            report["formats"].append(run_format(fmt, args, nodes, torch, log_lines))
        except Exception as e:
            import traceback

            traceback.print_exc()
            report.setdefault("errors", {})[fmt] = f"{type(e).__name__}: {e}"
    with open(os.path.join(args.out, "comfyui-e2e.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    md = markdown(report)
    with open(os.path.join(args.out, "comfyui-e2e.md"), "w") as f:
        f.write(md)
    print(md)
    ok_all = (not report.get("errors") and report["guarded_import"].get("pass")
              and report["workflow"].get("pass")
              and all(r["mlp_half"].get("pass") for r in report["formats"])
              and all(all(r["streamed_bit_equal"].values()) for r in report["formats"])
              and all(not isinstance(r["quantiser"], dict) or r["quantiser"]["pass"]
                      for r in report["formats"]))
    print(f"comfyui-e2e: {'PASS' if ok_all else 'FAIL'}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
