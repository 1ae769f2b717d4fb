"""Engine: one model's weights on one backend, running single DiT blocks."""

import sys

from ._load import native as _native
from .mod_runs import mod_runs as _mod_runs

# torch dtypes DLPack cannot carry everywhere: handed over as raw bytes
# (uint8 views) with their safetensors name.
_BYTE_VIEW_DTYPES = {"torch.float8_e4m3fn": "F8_E4M3", "torch.float8_e5m2": "F8_E5M2"}


def _is_torch(a):
    return type(a).__module__.startswith("torch") and hasattr(a, "detach")


def _dlpack_ready(name, a):
    """(safetensors dtype name or "", array) for the native loader."""
    if _is_torch(a):
        a = a.detach()
        if not a.is_contiguous():
            a = a.contiguous()
        dtype = _BYTE_VIEW_DTYPES.get(str(a.dtype), "")
        if dtype:
            a = a.view(sys.modules["torch"].uint8)
        return dtype, a
    if hasattr(a, "__dlpack__") or hasattr(a, "__array_interface__"):
        if hasattr(a, "flags") and not a.flags["C_CONTIGUOUS"]:  # numpy
            import numpy as np

            a = np.ascontiguousarray(a)
        return "", a
    raise TypeError(
        f"tensors['{name}']: {type(a).__name__} is not an array (expected a torch tensor, a "
        "numpy array or another object with __dlpack__)"
    )


def _entries(tensors):
    out = []
    for name, value in tensors.items():
        dtype, array = _dlpack_ready(name, value)
        out.append((str(name), dtype, array))
    return out


def _metadata(metadata):
    return {str(k): str(v) for k, v in (metadata or {}).items()}


def _detached(a):
    # torch refuses to export tensors that require grad; detach() shares memory.
    return a.detach() if _is_torch(a) and a.requires_grad else a


def _stream_handle(stream, x):
    """The cudaStream_t to run on, as an int (0: the legacy default stream)."""
    if stream is None:
        # The caller's stream: torch's current stream on x's device.
        if _is_torch(x) and x.device.type == "cuda" and "torch" in sys.modules:
            return int(sys.modules["torch"].cuda.current_stream(x.device).cuda_stream)
        return 0
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        return int(stream.cuda_stream)
    if isinstance(stream, int) and stream >= 0:
        return stream
    raise TypeError(
        f"stream: {stream!r} is not a CUDA stream (pass an int cudaStream_t, a "
        "torch.cuda.Stream or None)"
    )


def _bytes(name, value):
    """A byte budget as the native call takes it: a negative one is refused by name."""
    v = int(value)
    if v < 0:
        raise ValueError(f"{name} = {v} is out of range: it must be >= 0 bytes (0: no limit)")
    return v


def _runs(runs):
    return _mod_runs(runs, name="mod_runs")


class Engine:
    """One H3 model's weights on one backend. The engine holds no copy of the model: a
    checkpoint is mapped and read in place, tensors are used where they are (CPU or
    CUDA memory, kept referenced); a backend prepares what its kernels read (a CUDA
    engine uploads host weights once per block, or per call when they do not fit).

    Build with :meth:`from_checkpoint` or :meth:`from_tensors`; run blocks with
    :meth:`run_block`. Calls are serialised; the GIL is released while a block
    runs.
    """

    def __init__(self, native_engine):
        self._e = native_engine
        self.last_forward = None  # the report of the last forward() (tokens, seconds, ...)

    @classmethod
    def from_checkpoint(cls, path, backend="cpu", device=0, memory_budget=0, threads=0,
                        vram_budget=0):
        """Map a ComfyUI-format H3 safetensors file (bf16, int8 ConvRot, W4A8, NVFP4).

        backend: "cpu" or "cuda"; device: the GPU index for "cuda";
        memory_budget: activation arena budget in bytes (0 = unlimited);
        threads: CPU worker threads (0 = all); vram_budget: device bytes the blocks'
        weights may hold (0 = no limit): blocks stay prepared after their first call
        when the whole model fits, otherwise each call prepares its block
        (resident_weights says which).
        """
        return cls(_native._Engine.from_checkpoint(str(path), backend, device,
                                                   _bytes("memory_budget", memory_budget),
                                                   threads, _bytes("vram_budget", vram_budget)))

    @classmethod
    def from_tensors(cls, tensors, metadata=None, backend="cpu", device=0, memory_budget=0, threads=0,
                     lazy_blocks=False, vram_budget=0):
        """Build from a state dict: keys exactly as in a ComfyUI H3 safetensors file.

        A common "model.diffusion_model." prefix is allowed. Values are torch
        tensors (CPU or CUDA), numpy arrays or any DLPack array; quantised
        layers bring their companion tensors (int8: weight_scale and
        comfy_quant; W4A8: weight_s_rel, weight_s_channel, ...), or describe
        them in metadata["_quantization_metadata"] like a file header. The
        same per-layer format detection and checks as a file apply. The
        engine borrows the tensors: its weights are views of them (kept
        referenced, never written, never copied; only small scales and biases
        are read to be checked), so they must not be modified in place while
        the engine lives. A CUDA engine uses CUDA tensors where they are.

        lazy_blocks=True: the engine keeps the config only (every name and shape
        is checked, no tensor is kept); give each call its block's tensors
        (run_block(..., weights=...)) or load them with load_block().
        vram_budget: as in from_checkpoint.
        """
        md = {str(k): str(v) for k, v in (metadata or {}).items()}
        return cls(_native._Engine.from_arrays(_entries(tensors), md, backend, device,
                                               _bytes("memory_budget", memory_budget), threads,
                                               bool(lazy_blocks),
                                               _bytes("vram_budget", vram_budget)))

    def load_block(self, index, tensors, metadata=None):
        """Give DiT block ``index`` its weights: ``tensors`` holds that block's keys as in
        the model (``blocks.<index>.attn.qkv_proj.weight``, ..., any common prefix), with the
        same formats and checks as from_tensors (borrowed, as there). Replaces what the
        block had; a prepared copy of the old weights is never used again."""
        md = {str(k): str(v) for k, v in (metadata or {}).items()}
        self._e.load_block(int(index), _entries(tensors), md)

    def drop_block(self, index):
        """Forget DiT block ``index``'s weights (and any prepared copy)."""
        self._e.drop_block(int(index))

    def block_loaded(self, index):
        """True when DiT block ``index`` has weights to run with."""
        return bool(self._e.block_loaded(int(index)))

    @property
    def config(self):
        """The model's shape: hidden, heads, blocks, time_dim, rope_dim, time_form, format, ..."""
        return self._e.config

    @property
    def backend(self):
        """"cpu" or "cuda"."""
        return self._e.backend

    @property
    def device(self):
        """The GPU index of a "cuda" engine."""
        return self._e.device

    @property
    def resident_weights(self):
        """True (default, when the model fits vram_budget): each block's prepared weights
        (a CUDA engine's device copy) stay after its first call. False: they go after
        every call and are prepared again from the engine's source on the next one, so
        the engine adds at most one block of weights to the VRAM of a host that keeps its
        own copy. Calls given weights= use those, prepared for that call only."""
        return self._e.resident_weights

    @resident_weights.setter
    def resident_weights(self, value):
        self._e.resident_weights = bool(value)

    @property
    def weight_bytes(self):
        """Bytes prepared weights hold now (device memory on a CUDA engine; 0 for weights
        used in place)."""
        return self._e.weight_bytes

    @property
    def weight_peak_bytes(self):
        """The most bytes prepared weights held at once."""
        return self._e.weight_peak_bytes

    @property
    def last_placement(self):
        """Where the last run_block's own memory lived: the placement planner's line
        ("stock" for a stock call)."""
        return self._e.last_placement["line"]

    @property
    def last_placement_info(self):
        """The last run_block's placement as a dict: line, kv ("device" or
        "host-staged"), predicted_peaks {kv, attn, mlp} (h3stream's own arena bytes per
        phase, beside the measured ones of ledger()), staged_to_host_bytes,
        staged_to_device_bytes, copy_seconds, exposed_copy_seconds (the part of the copy
        time compute waited for; the rest hid under compute)."""
        return self._e.last_placement

    @property
    def last_self_check(self):
        """The line of the last run_block with options.self_check, or None."""
        return self._e.last_self_check

    @property
    def kv_mix_heads(self):
        """kv_store 'kvmix': {block index: [heads on 8 bits]} as each block's first call
        calibrated them (kept for the later calls; {} until then, and when
        Options.kv_mix_heads gives the heads)."""
        return self._e.kv_mix_heads

    def forward(self, video_latent, audio_latent, context, sigma, *, cond_latent=None,
                text_token_tags=None, audio_scale=4.0, seed=0, visual_cond_noise_aug=0.999,
                mode="streamed", options=None):
        """The whole model on real inputs, as ComfyUI's MiniMaxH3Model.forward runs one
        text-to-video+audio sampling step (and the first-frame image-to-video keyframe).

        video_latent: [1, C, T, H, W] bf16 or float32 (odd H or W padded as ComfyUI pads);
        audio_latent: [1, 32, 2, frames] bf16 or float32, as the sampler carries it;
        context: [1, L, text_dim] bf16 raw text-encoder states (the refiner runs inside);
        sigma: the step's sigma in [0, 1] (float or one-element tensor); the model sees
        timestep = sigma * 1000 as ComfyUI's model_sampling hands it.
        cond_latent: an image-to-video keyframe latent [1, C, Tc, H, W] at frame 0, with
        ComfyUI's noise augmentation (visual_cond_noise_aug, seed); text_token_tags: one
        modality tag per text token (0 video, 1 text, 2 audio); audio_scale: the sampler's
        audio carry (4 when sampling the packed latent, 1 for none).

        Returns (video, audio): the predictions in the latents' dtypes and shapes, torch
        tensors on the latents' device for torch input. CUDA inputs are read through host
        memory (they are small); the engine runs on its own backend. mode="stock" runs every
        block stock: the same bits. The report of the call is in ``last_forward``.
        """
        torch = sys.modules.get("torch")
        as_torch = _is_torch(video_latent)
        device = video_latent.device if as_torch else None

        def host(name, a):
            if a is None:
                return None
            if _is_torch(a):
                return a.detach().contiguous().cpu()
            if hasattr(a, "__dlpack__") or hasattr(a, "__array_interface__"):
                return a
            raise TypeError(f"{name}: {type(a).__name__} is not an array (expected a torch "
                            "tensor or another DLPack array)")

        v, a, c = host("video_latent", video_latent), host("audio_latent", audio_latent), \
            host("context", context)
        if _is_torch(sigma) or hasattr(sigma, "item"):
            if getattr(sigma, "numel", lambda: 1)() != 1:
                raise ValueError(f"sigma: expected one value, got shape {tuple(sigma.shape)}")
            sigma = sigma.item()
        if as_torch:
            vo, ao = torch.empty_like(v), torch.empty_like(a)
        else:
            import numpy as np
            vo, ao = np.empty_like(v), np.empty_like(a)
        tags = [] if text_token_tags is None else [int(t) for t in
                                                   (text_token_tags.reshape(-1).tolist()
                                                    if hasattr(text_token_tags, "tolist")
                                                    else text_token_tags)]
        self.last_forward = self._e.forward(
            v, a, c, float(sigma), vo, ao, cond_latent=host("cond_latent", cond_latent),
            text_token_tags=tags, audio_scale=float(audio_scale), seed=int(seed),
            visual_cond_noise_aug=float(visual_cond_noise_aug), mode=mode, options=options)
        if as_torch and device is not None and device.type != "cpu":
            vo, ao = vo.to(device), ao.to(device)
        return vo, ao

    def run_block(self, index, x, t_emb, mod_runs, rope, *, mode="streamed", options=None,
                  stream=None, phases="all", weights=None, metadata=None):
        """Run DiT block ``index`` in place on ``x``, exactly ComfyUI's
        ``DiTBlock.forward(x, t_emb, mod_segments, rope_freqs)``.

        x: bf16 [S, hidden], contiguous, on the engine's device; updated in
        place (its memory is used directly, never copied).
        t_emb: [M, time_dim] as ComfyUI passes it to the block: bf16 (full
        time form; SiLU and the adaLN linear are applied here) or fp32 (curve
        form). mod_runs: ComfyUI's mod_segments, (begin, end, mod_row) covering
        [0, S) in order; a row is an int or one integer index per token (ComfyUI
        with a partial denoise mask), see h3stream.mod_runs. rope: bf16 [S, rope_dim/2, 2] (cos, sin); see
        rope_from_comfy. mode: "streamed" or "stock" (bit-identical results).
        options: Options (default Options()). As in h3stream's own forward, a
        short sequence gains nothing from streaming: mode="streamed" with
        S < options.min_tokens (default 32768) runs the stock block; pass
        Options(min_tokens=0) to stream at any length. stream: cudaStream_t as
        int, a torch.cuda.Stream, or None for torch's current stream on x's
        device (CPU: ignored). phases: "all", or "attn" for the attention half
        only (x += gate_msa * attn(...); the caller runs the model's own MLP);
        min_tokens picks the path of that half the same way.
        options.self_check: first compare stock with streamed on copies of x
        (last_self_check has the line), whichever path then runs.
        weights: this call's block tensors ({name: tensor}, the block's keys as in
        the model, quantised layers with their companions; metadata as in
        from_tensors), borrowed for the call: used in place when they already are
        on the engine's device in the kernels' form (a CUDA engine and ComfyUI's
        CUDA tensors: no copy), otherwise uploaded for this call. None: the
        engine's own weights for the block.

        Returns the mode that ran: "stock" or "streamed".
        Wrong dtypes raise TypeError; wrong shapes, devices, contiguity and
        option values raise ValueError naming the argument.
        """
        return self._e.run_block(index, _detached(x), _detached(t_emb), _runs(mod_runs),
                                 _detached(rope), mode=mode, options=options,
                                 stream=_stream_handle(stream, x), phases=phases,
                                 weights=None if weights is None else _entries(weights),
                                 metadata=_metadata(metadata))

    def self_check(self, index, x, t_emb, mod_runs, rope, *, options=None, stream=None,
                   weights=None, metadata=None):
        """self_check (docs/FEATURES.md "Controls") on one block: stock vs streamed variants
        (full, q_only, kv_only, mlp_only, none) on copies of x, at any length (min_tokens
        does not apply: the check always runs both). weights: as in run_block. Returns {"line",
        "all_equal", "variants"}, plus with an approximate kv_store "tier" ({"kv_store",
        "approximate": True, "rel_rms", "max_abs"}: its stock block against the exact
        store's) or, when the backend has no kernel for it, "tier_fallback" (its name:
        the exact store ran)."""
        return self._e.self_check(index, _detached(x), _detached(t_emb), _runs(mod_runs),
                                  _detached(rope), options=options,
                                  stream=_stream_handle(stream, x),
                                  weights=None if weights is None else _entries(weights),
                                  metadata=_metadata(metadata))

    def ledger(self):
        """The arena's phase ledger since the last reset: one dict per (block, phase) with
        allocated_at_start, allocated (at its end), peak and reserved bytes."""
        return self._e.ledger()

    def reset_ledger(self):
        """Clear the ledger and restart the arena peak."""
        self._e.reset_ledger()

    def arena_peak(self):
        """Highest activation bytes live since construction or reset_ledger()."""
        return self._e.arena_peak()

    def arena_allocated(self):
        """Activation bytes live now (0 between calls)."""
        return self._e.arena_allocated()

    def __repr__(self):
        c = self.config
        return (f"h3stream.Engine({c['name']}, {c['format']}, {c['blocks']} blocks, "
                f"hidden {c['hidden']}, backend {self.backend})")
