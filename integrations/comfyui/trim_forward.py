"""trim_forward inside ComfyUI: release the patch embeds once the packed sequence exists.

ComfyUI's MiniMax-H3 _forward keeps `video_embed` (bf16 [video rows, hidden], 2.14 GiB at
216k tokens) and `audio_embed` alive through the whole block loop, though it only reads
them to assemble the packed sequence h. The node wraps the two patch projections (an
object patch on their forward, so the module tree and its state_dict are untouched) to
produce that embed itself in _forward's compute dtype (the same fp32 GEMM, then the same
one rounding: _forward's own `.to(dtype)` is then a no-op returning the same tensor),
remembers it, and frees its storage when block 0 starts. A DIFFUSION_MODEL wrapper tells
the projections the compute dtype (context.dtype, as _forward takes it) and forgets the
embeds when the forward ends; without it the projections run unchanged.
"""

import logging

WRAPPER_KEY = "h3stream_trim_forward"
log = logging.getLogger("h3stream.comfyui")


class EmbedHolder:
    """The embeds of the forward in flight and its compute dtype."""

    def __init__(self):
        self.dtype = None
        self.embeds = []
        self.released_bytes = 0  # by the last release()
        self.said_graph = False

    def release(self):
        """Frees the recorded embeds' memory (block 0 has started: h holds the rows)."""
        n = 0
        for t in self.embeds:
            storage = t.untyped_storage()
            n += storage.nbytes()
            storage.resize_(0)
        self.embeds.clear()
        self.released_bytes = n
        return n

    def forget(self):
        self.dtype = None
        self.embeds.clear()


class PatchEmbed:
    """The replacement of a patch projection's forward: the module's own forward, then the
    compute dtype's rounding, recorded for release."""

    def __init__(self, forward, holder):
        self.forward = forward
        self.holder = holder

    def __call__(self, x):
        y = self.forward(x)
        if self.holder.dtype is None:
            return y
        out = y.to(self.holder.dtype)
        self.holder.embeds.append(out)
        return out


def malloc_graph_on(x):
    """Whether ComfyUI records this forward's allocations in a malloc graph (upstream's
    comfy.model_prefetch with dynamic VRAM): the graph owns the embeds' memory per scope,
    so freeing them inside block 0's scope is left to it."""
    try:
        import comfy.model_prefetch as prefetch
    except ImportError:
        return False
    enabled = getattr(prefetch, "malloc_graph_enabled", None)
    first = x[0] if isinstance(x, (list, tuple)) else x
    device = getattr(first, "device", None)
    return bool(enabled(device)) if enabled is not None and device is not None else False


def diffusion_wrapper(holder):
    def wrapper(executor, x, *args, **kwargs):
        context = kwargs.get("context", args[1] if len(args) > 1 else None)
        holder.dtype = getattr(context, "dtype", None)
        if holder.dtype is not None and malloc_graph_on(x):
            holder.dtype = None
            if not holder.said_graph:
                holder.said_graph = True
                log.warning("[h3stream] trim_forward is off: ComfyUI records this forward's "
                            "allocations in a malloc graph, which owns the patch embeds")
        try:
            return executor(x, *args, **kwargs)
        finally:
            holder.forget()
    return wrapper


def apply(m, dm, holder):
    """Installs the trim on the ModelPatcher clone `m` of diffusion model `dm`."""
    import comfy.patcher_extension as pe

    for name in ("video_patch_proj", "audio_patch_proj"):
        m.add_object_patch(f"diffusion_model.{name}.forward",
                           PatchEmbed(getattr(dm, name).forward, holder))
    pe.add_wrapper_with_key(pe.WrappersMP.DIFFUSION_MODEL, WRAPPER_KEY, diffusion_wrapper(holder),
                            m.model_options, is_model_options=True)
