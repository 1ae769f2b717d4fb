"""H3 Free Cache and H3 Evict Text Encoder: passthrough nodes that free memory at
a chosen point of a workflow (the value wired through orders them)."""

import gc
import logging

log = logging.getLogger("h3stream.comfyui")


class AnyType(str):
    """A type name that matches every socket (ComfyUI compares types with !=)."""

    def __ne__(self, other):
        return False


ANY = AnyType("*")


class H3FreeCache:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "value": (ANY, {"tooltip": "Passed through unchanged; the cache is freed when it is ready."}),
            "drop_h3stream_engines": ("BOOLEAN", {
                "default": False,
                "tooltip": "Also forget h3stream's engines (each holds the model's config and its "
                "device buffers, never the weights); the next streamed block rebuilds them."}),
            "unload_models": ("BOOLEAN", {
                "default": False,
                "tooltip": "Also unload every model ComfyUI holds on the GPU."}),
        }}

    RETURN_TYPES = (ANY,)
    RETURN_NAMES = ("value",)
    FUNCTION = "run"
    CATEGORY = "advanced/model/h3stream"
    DESCRIPTION = ("Passthrough: collects garbage and returns cached, unused GPU memory to the "
                   "driver (PyTorch's caching allocator), optionally h3stream's engines and "
                   "ComfyUI's loaded models too.")

    def run(self, value, drop_h3stream_engines=False, unload_models=False):
        import comfy.model_management as mm

        dropped = 0
        if drop_h3stream_engines:
            from .nodes_streamed import drop_engines

            dropped = drop_engines()
        if unload_models:
            mm.unload_all_models()
        gc.collect()
        mm.soft_empty_cache()
        log.info(f"[h3stream] freed cache (engines dropped: {dropped}, models unloaded: {unload_models})")
        return (value,)


class H3EvictTextEncoder:
    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "clip": ("CLIP", {"tooltip": "The text encoder to move off the GPU."}),
            "value": (ANY, {"tooltip": "Typically the CONDITIONING it produced: passed through, "
                                       "so the eviction happens after encoding."}),
        }}

    RETURN_TYPES = (ANY,)
    RETURN_NAMES = ("value",)
    FUNCTION = "run"
    CATEGORY = "advanced/model/h3stream"
    DESCRIPTION = ("Passthrough: unloads the text encoder (Qwen3-VL for H3) from the GPU once "
                   "its conditioning exists, so sampling gets that memory. ComfyUI reloads it "
                   "if it is needed again.")

    def run(self, clip, value):
        import comfy.model_management as mm

        patcher = getattr(clip, "patcher", None)
        if patcher is not None:
            if hasattr(mm, "unload_model_and_clones"):
                mm.unload_model_and_clones(patcher)
            else:  # older ComfyUI
                for lm in list(mm.current_loaded_models):
                    if lm.model is not None and lm.model.is_clone(patcher):
                        lm.model_unload()
                        mm.current_loaded_models.remove(lm)
        gc.collect()
        mm.soft_empty_cache()
        log.info("[h3stream] text encoder evicted from the GPU")
        return (value,)
