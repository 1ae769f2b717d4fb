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

WRAPPER_KEY = "h3stream_trim_forward"


class EmbedHolder:
    """The embeds of the forward in flight and its compute dtype."""

    def __init__(self):
        self.dtype = None
        self.embeds = []
        self.released_bytes = 0  # by the last release()

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


def diffusion_wrapper(holder):
    def wrapper(executor, x, *args, **kwargs):
        context = kwargs.get("context", args[1] if len(args) > 1 else None)
        holder.dtype = getattr(context, "dtype", None)
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
