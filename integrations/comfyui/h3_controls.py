"""The controls of "H3 Streamed Blocks": one table, the single source of names,
defaults, ranges and tooltips (docs/FEATURES.md "Controls"). Pure Python: the tests
check it against that table without ComfyUI, torch or the native module.

What a control does *inside ComfyUI* is said in its tooltip, including where it
has no effect here (the model's own _forward owns what the node cannot reach).
"""

from dataclasses import dataclass, field
from typing import Optional

INT_MAX_CHUNK = 262144
# h3stream.ATTN_KV_TILE (this file loads without the module; test_controls.py
# checks the two agree): kv_block's step.
ATTN_KV_TILE = 128


@dataclass(frozen=True)
class Control:
    name: str
    kind: str  # "INT" | "BOOLEAN" | "COMBO" | "STRING"
    default: object
    tooltip: str
    min: Optional[int] = None
    max: Optional[int] = None
    step: int = 1
    choices: tuple = field(default_factory=tuple)

    def comfy_input(self):
        """The (type, options) pair of a ComfyUI V1 INPUT_TYPES entry."""
        if self.kind == "COMBO":
            return (list(self.choices), {"default": self.default, "tooltip": self.tooltip})
        if self.kind == "STRING":
            return ("STRING", {"default": self.default, "tooltip": self.tooltip,
                               "multiline": False})
        opts = {"default": self.default, "tooltip": self.tooltip}
        if self.kind == "INT":
            opts.update(min=self.min, max=self.max, step=self.step)
        return (self.kind, opts)

    def check(self, value):
        """ValueError naming the control, the value and the range when out of range."""
        if self.kind == "INT":
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{self.name}: {value!r} is not an integer")
            if not self.min <= value <= self.max:
                raise ValueError(f"{self.name} = {value} is outside {self.min}..{self.max}")
            if self.step > 1 and value % self.step:
                raise ValueError(f"{self.name} = {value} must be a multiple of {self.step}")
        elif self.kind == "BOOLEAN":
            if not isinstance(value, bool):
                raise ValueError(f"{self.name}: {value!r} is not a boolean")
        elif self.kind == "STRING":
            if not isinstance(value, str):
                raise ValueError(f"{self.name}: {value!r} is not a string")
            parse_head_list(self.name, value)
        elif value not in self.choices:
            raise ValueError(f"{self.name} = {value!r} is not one of {', '.join(self.choices)}")
        return value


def parse_head_list(name, text):
    """'0, 5,9' -> [0, 5, 9] (sorted); '' -> []. ValueError naming the bad item."""
    heads = []
    for item in text.split(","):
        item = item.strip()
        if not item and "," not in text:
            continue
        if not item.isdigit():
            raise ValueError(f"{name}: {item!r} is not a head index (give non-negative integers "
                             f"separated by commas, e.g. '0,5,9', or leave it empty)")
        heads.append(int(item))
    if len(set(heads)) != len(heads):
        raise ValueError(f"{name}: a head is listed twice in {text!r}")
    return sorted(heads)


# Exactness words used below: "exact" = the streamed block is bit-identical to
# h3stream's stock block (not to ComfyUI's PyTorch block, whose cuBLAS/flash
# reduction orders differ by a few bf16 ulps; self_check measures that).
CONTROLS = (
    Control(
        "q_chunk", "INT", 16384, min=1024, max=INT_MAX_CHUNK,
        tooltip="Query rows per attention call (balanced chunks). Exact at any value: "
        "the output is bit-identical to h3stream's stock block. Smaller = less memory for "
        "Q and the attention output."),
    Control(
        "kv_chunk", "INT", 16384, min=1024, max=INT_MAX_CHUNK,
        tooltip="Rows per QKV projection chunk while building the K/V store. Exact at any "
        "value. The fused QKV [rows, 3*7168] of one chunk is the phase's peak."),
    Control(
        "mlp_chunk", "INT", 16384, min=0, max=INT_MAX_CHUNK,
        tooltip="Rows per MLP chunk (norm2 -> fc1 -> SwiGLU -> fc2 -> gated residual). Exact "
        "at any value. 0 = h3stream runs only the attention half and the model's own MLP "
        "module runs the rest (composes with other MLP-chunking nodes; that half is "
        "ComfyUI's arithmetic, not bit-identical to h3stream's stock)."),
    Control(
        "min_tokens", "INT", 32768, min=0, max=1048576,
        tooltip="Below this packed sequence length the node calls ComfyUI's original block "
        "(short clips gain nothing from streaming). 0 = always use h3stream."),
    Control(
        "kv_block", "INT", 0, min=0, max=INT_MAX_CHUNK, step=ATTN_KV_TILE,
        tooltip="K/V rows attended per pass, the running softmax state carried between "
        "passes; a multiple of the 128-key attention tile, so it is exact (bit-identical, unlike the "
        "reference node's 1-ulp log-sum-exp combine). 0 = the whole K/V in one pass, or the "
        "planner's tile when the K/V are host-staged. With host-staged K/V it is the tile that "
        "crosses the bus; resident, it saves nothing."),
    Control(
        "final_layer_chunk", "INT", 16384, min=0, max=INT_MAX_CHUNK,
        tooltip="Rows per chunk through the output head (norm -> modulation -> fp32); stock "
        "promotes the whole video span to fp32 at once (~10 GiB at 216k tokens, the "
        "forward's peak). Runs ComfyUI's own final-layer modules chunk by chunk. 0 = the "
        "model's own final layer."),
    Control(
        "final_layer_gemm", "COMBO", "exact", choices=("exact", "streamed"),
        tooltip="With final_layer_chunk > 0. exact: chunks are normed/modulated/cast into "
        "one fp32 buffer and the head GEMM runs once at full M, the same call as stock "
        "(bit-equal to the model's own final layer). streamed: no full-span fp32 buffer; "
        "every head GEMM runs on exactly final_layer_chunk rows (the last window overlaps), "
        "so all rows get one cuBLAS kernel. Bit-equal to stock where cuBLAS picks the same "
        "kernel for that M as for the whole span: measured on an H100 at the default "
        "16384 (fp32 and TF32); at 4096 the fp32 audio head differs by ~3e-6 relative. "
        "self_check reports it on your GPU."),
    Control(
        "kv_store", "COMBO", "bf16", choices=("bf16", "kvi8r", "kvi8s", "kvfp4s", "kvmix"),
        tooltip="K/V storage tier. bf16 = the exact resident store (2 bytes per element). "
        "The others are APPROXIMATE (never equal to the exact store; streamed == their own "
        "stock block bit for bit): kvi8r = int8 per row after a Hadamard rotation (1.02 "
        "bytes/element, attention rel-rms ~1e-2): half the K/V memory for a little speed; "
        "kvi8s = SageAttention-2 layout, int8 Q/K and fp8 V/P (1.04 bytes/element, attention "
        "rel-rms ~4e-2): half the K/V memory and, on an H100/H200, faster attention than the "
        "exact store; kvfp4s = NVFP4 K (rotated, centred per 256-token block) and V (0.57 "
        "bytes/element, attention rel-rms ~0.14): the least memory and the least accurate; no "
        "GPU here has fp4 tensor cores, so it decodes blocks of keys to bf16 for the exact "
        "kernel; kvmix = per head either kvi8s or kvfp4s (28 of 56 heads on 8 bits by "
        "default, ~0.80 bytes/element; the heads picked per block on its first call by their "
        "fp4 sensitivity, or given in kv_mix_heads): error, memory and speed between the two "
        "stores'. On a GPU without the tier's kernel the engine logs one line and runs the "
        "exact store (kvi8s and kvmix need an RTX 40-series or newer GPU, compute capability "
        "8.9+; kvfp4s and kvi8r run on every GPU, off Hopper by decoding blocks of keys to 16 "
        "bits for the exact kernel). Measured speeds: docs/PERFORMANCE.md in the h3stream "
        "repository."),
    Control(
        "trim_forward", "BOOLEAN", True,
        tooltip="Release the patch embeds once the packed sequence exists (the video embed "
        "is 2.1 GiB at 216k tokens; same math): the node produces them through the patch "
        "projections in the model's compute dtype and frees them when block 0 starts."),
    Control(
        "self_check", "BOOLEAN", False,
        tooltip="On block 0's first long call: run h3stream's stock block and its streamed "
        "variants (full, q only, kv only, mlp only, none) on copies plus ComfyUI's own "
        "block, and log one line: streamed vs h3stream stock (must be 0 ulp) and h3stream "
        "vs ComfyUI (max/mean ulps). Costs about three extra block runs once. With "
        "final_layer_chunk > 0 the first chunked final layer is also compared with the "
        "model's own (one line: bit-equal or not on this GPU)."),
    Control(
        "exact_av_rows", "BOOLEAN", False,
        tooltip="With an approximate K/V store: the text and audio query rows (those ComfyUI's "
        "mod_segments modulate with a text or audio adaLN row) attend a retained bf16 K/V "
        "with the exact kernel, so their rows of each block's output are the exact store's, "
        "bit for bit; audio is ~1% of the rows and the most sensitive to the cheap stores' "
        "error. Costs the exact K/V beside the store. No effect with kv_store bf16."),
)

# Placement: where h3stream's own memory lives (docs/FEATURES.md "Controls"). ComfyUI
# owns the weights and the residual; the budget covers the rest.
ADDED = (
    Control(
        "vram_budget", "INT", 0, min=0, max=1048576,
        tooltip="MiB of device memory h3stream's own allocations may take per block call "
        "(the K/V store and the chunk buffers; ComfyUI holds the weights and the sequence). "
        "0 = what ComfyUI can give at each call: the free memory plus the weight pages its "
        "dynamic VRAM can offload, less the block's own weights, --reserve-vram and a margin "
        "(a twentieth, at least 512 MiB). When "
        "the K/V store does not fit, it is staged in pinned host memory and streamed back in "
        "kv_block tiles: exact (bit-identical), slower by the bus traffic."),
    Control(
        "kv_placement", "COMBO", "auto", choices=("auto", "device", "host"),
        tooltip="Where the K/V store lives. auto: on the device when it fits vram_budget, "
        "else host-staged. device: always on the device. host: always in pinned host "
        "memory (exact; costs bus traffic, saves ~28 KB of device memory per token)."),
)
# kvmix's head choice (docs/FEATURES.md "Controls").
KVMIX = (
    Control(
        "kv_mix_heads", "STRING", "",
        tooltip="With kv_store kvmix: the heads kept on 8 bits (kvi8s), e.g. '0,5,9', the "
        "same for every block; the others go on 4 bits (kvfp4s). Empty (default): each "
        "block picks its own on its first call, the kv_mix_count heads whose K/V lose most "
        "to fp4 (on a sample of up to 2,048 tokens), and keeps them for later steps. "
        "APPROXIMATE like both stores; no effect with other stores."),
    Control(
        "kv_mix_count", "INT", 0, min=0, max=1024,
        tooltip="With kv_store kvmix and kv_mix_heads empty: how many heads each block keeps "
        "on 8 bits. 0 = half of them (28 of H3's 56). More = closer to kvi8s in error and "
        "memory, fewer = closer to kvfp4s."),
)
CONTROLS = CONTROLS + ADDED + KVMIX

BY_NAME = {c.name: c for c in CONTROLS}
DEFAULTS = {c.name: c.default for c in CONTROLS}


def checked(values):
    """Every control's value (defaults filled in), each checked against its range."""
    unknown = set(values) - set(BY_NAME)
    if unknown:
        raise ValueError(f"unknown control(s): {', '.join(sorted(unknown))}")
    out = dict(DEFAULTS)
    out.update(values)
    for c in CONTROLS:
        c.check(out[c.name])
    return out


def engine_options_kwargs(values):
    """The keyword arguments of h3stream.Options for these control values."""
    v = checked(values)
    out = {k: v[k] for k in ("q_chunk", "kv_chunk", "mlp_chunk", "min_tokens", "kv_block",
                             "final_layer_chunk", "final_layer_gemm", "kv_store",
                             "exact_av_rows", "trim_forward", "self_check", "kv_placement",
                             "kv_mix_count")}
    out["vram_budget"] = v["vram_budget"] << 20  # MiB -> bytes
    out["kv_mix_heads"] = parse_head_list("kv_mix_heads", v["kv_mix_heads"])
    return out
