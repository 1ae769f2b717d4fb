"""How much device memory h3stream's own buffers (the K/V store, the chunk buffers) may take
at one block call inside ComfyUI, when the node's vram_budget is 0.

The engine's own rule (the free device memory less a tenth) is wrong inside ComfyUI's dynamic
VRAM: comfy-aimdo fills whatever is free with the model's weight pages and gives them back
when an allocation needs the room (it hooks the driver's allocator, so h3stream's allocations
evict weights like PyTorch's do). Free memory then reads near zero at every call and the
planner would stage the K/V in host memory, at several seconds of bus traffic per block, while
the weights it leaves on the card stream cheaply anyway (a block is ~0.9 GB against ~2.7 s of
attention at 217k tokens). So the budget counts what ComfyUI would give: the free memory plus
the weight pages aimdo can evict (ModelPatcher.get_free_memory counts the same), less the
block's own weights (the call's casts hold them), ComfyUI's reserve (--reserve-vram) and a
margin for the caching allocators.
"""

MIB = 2**20
GIB = 2**30
MARGIN_MIN = 512 * MIB  # context growth, cuBLAS workspaces, the allocators' rounding


def aimdo_resident(device):
    """Bytes of model weight pages comfy-aimdo holds on `device` for the models ComfyUI has
    loaded, which it evicts when an allocation needs the room (0 without dynamic VRAM). Read
    from each model's VBAR (ModelPatcherDynamic.loaded_size's source), not from
    comfy_aimdo.model_vbar.vbars_analyze, which logs a WARNING line for every page pinned at
    that moment: ~150 console lines in a step's first blocks when the node called it per
    block (H100, 2026-12-06)."""
    try:
        import comfy.memory_management as cmm
    except ImportError:
        return 0
    if not getattr(cmm, "aimdo_enabled", False):
        return 0
    try:
        import comfy.model_management as mm

        total, seen = 0, set()
        for loaded in list(getattr(mm, "current_loaded_models", [])):
            model = getattr(getattr(loaded, "model", None), "model", None)
            for dev, vbar in (getattr(model, "dynamic_vbars", None) or {}).items():
                if id(vbar) in seen or str(dev) != str(device):
                    continue
                seen.add(id(vbar))
                total += int(vbar.loaded_size())
        return total
    except Exception:  # an aimdo without the call: count nothing rather than fail a block
        return 0


def comfy_reserve():
    """ComfyUI's --reserve-vram (bytes), which it keeps free of its own work."""
    try:
        import comfy.model_management as mm

        return int(mm.extra_reserved_memory())
    except Exception:
        return 0


# PyTorch's cached-but-unused device memory above which a block call hands it back first.
TORCH_CACHE_RELEASE = 256 * MIB


def release_torch_cache(device):
    """Hands PyTorch's cached, unused device memory back to the driver when it holds more
    than TORCH_CACHE_RELEASE, and returns the bytes released. h3stream allocates from the
    driver, and between two steps ComfyUI's final layer leaves its full-span fp32 buffers
    (~4.6 GB at 216k tokens) in PyTorch's cache, as block 0 leaves the patch embeds that
    trim_forward frees: measured on an H100 behind a 15.4 GiB fence, step 2's block 0 saw
    0.38 GiB free with 11.7 GiB reserved by PyTorch."""
    import torch

    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    if cached <= TORCH_CACHE_RELEASE:
        return 0
    torch.cuda.empty_cache()
    return cached - (torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def comfy_cast_buffers(device):
    """Bytes of ComfyUI's dynamic-VRAM cast buffers on `device` (comfy-aimdo VRAMBuffers, one
    per offload stream): grown to the largest cast group a step needed and kept until the
    prompt ends (model_management.reset_cast_buffers), outside PyTorch's allocator."""
    try:
        import comfy.model_management as mm

        index = getattr(device, "index", None) or 0  # a VRAMBuffer names its device by index
        return sum(int(buf.size()) for buf in list(mm.STREAM_AIMDO_CAST_BUFFERS.values())
                   if buf.device == index)
    except Exception:
        return 0


def device_budget(device, held_bytes=0):
    """(budget bytes, parts dict) for h3stream's own allocations at a block call on a CUDA
    `device`; held_bytes: what the call itself will hold beside them (its weight casts)."""
    import torch

    released = release_torch_cache(device)
    free, _total = torch.cuda.mem_get_info(device)
    evictable = aimdo_resident(device)
    reserve = comfy_reserve()
    avail = free + evictable - reserve - int(held_bytes)
    margin = max(avail // 20, MARGIN_MIN)
    budget = max(avail - margin, 0)
    # What holds the rest of the card, for the plan line and a refusal: a user (and we) can
    # then tell PyTorch's live tensors and cache from ComfyUI's cast buffers and weights.
    return budget, {"free": free, "comfy_offloadable": evictable, "reserve": reserve,
                    "held": int(held_bytes), "margin": margin, "budget": budget,
                    "torch_cache_released": released,
                    "torch_allocated": int(torch.cuda.memory_allocated(device)),
                    "torch_reserved": int(torch.cuda.memory_reserved(device)),
                    "torch_allocator": torch_allocator(),
                    "comfy_cast_buffers": comfy_cast_buffers(device)}


def torch_allocator():
    """PyTorch's CUDA allocator backend: 'native' (its caching allocator) or
    'cudaMallocAsync' (what ComfyUI's main.py picks unless --disable-cuda-malloc)."""
    import torch

    try:
        return str(torch.cuda.get_allocator_backend())
    except Exception:
        return "unknown"


# PyTorch's cache still held after empty_cache() above which a refusal names the allocator.
STUCK_CACHE = 1 * GIB


def allocator_hint(parts):
    """A refusal's hint when PyTorch's native allocator keeps a cache it could not hand back
    (its segments are freed only whole: behind a 15.4 GiB fence on an H200 step 2 was refused
    with 13.3 GiB held, where the cudaMallocAsync backend handed 4.19 GiB back; 2026-12-06)."""
    if parts.get("torch_allocator") != "native":
        return ""
    cached = parts.get("torch_reserved", 0) - parts.get("torch_allocated", 0)
    if cached < STUCK_CACHE:
        return ""
    return (f" PyTorch's native allocator keeps {cached / GIB:.2f} GiB it could not hand back: "
            "start ComfyUI without --disable-cuda-malloc (its default cudaMallocAsync allocator "
            "returns it).")


def module_bytes(module):
    """Bytes of a module's parameters and buffers (a block's weights as ComfyUI holds them)."""
    n = 0
    for t in list(module.parameters()) + list(module.buffers()):
        n += t.numel() * t.element_size()
    return n


def gib_text(b):
    """Bytes as GiB for the plan line and a refusal."""
    return f"{b / GIB:.2f} GiB"


def describe(parts):
    released = (f" (after {gib_text(parts['torch_cache_released'])} of PyTorch's cache released)"
                if parts.get("torch_cache_released") else "")
    return (f"free {gib_text(parts['free'])}{released} + model weights ComfyUI can offload "
            f"{gib_text(parts['comfy_offloadable'])} - this block's weights {gib_text(parts['held'])} - "
            f"ComfyUI's reserve {gib_text(parts['reserve'])} - margin {gib_text(parts['margin'])} = "
            f"{gib_text(parts['budget'])}{holders(parts)}")


def holders(parts):
    """' (the card also holds PyTorch's tensors ... ComfyUI's cast buffers ...)' where known."""
    if "torch_allocated" not in parts:
        return ""
    cached = parts["torch_reserved"] - parts["torch_allocated"]
    return (f" (the card also holds PyTorch's tensors {gib_text(parts['torch_allocated'])} + its "
            f"cache {gib_text(max(cached, 0))}, ComfyUI's cast buffers "
            f"{gib_text(parts.get('comfy_cast_buffers', 0))})")
