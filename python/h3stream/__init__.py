"""h3stream: exact token-chunked ("streamed") MiniMax-H3 DiT blocks.

A streamed block is bit-identical to the whole-sequence ("stock") block for
every weight format and chunk size. Tensors cross into the native engine
through DLPack (torch, numpy, anything with ``__dlpack__``) without copies;
nothing here links against libtorch.

    import h3stream
    eng = h3stream.Engine.from_checkpoint("h3_int8.safetensors", backend="cuda")
    eng.run_block(0, x, t_emb, mod_segments, h3stream.rope_from_comfy(rope_freqs),
                  options=h3stream.Options(q_chunk=8192))
"""

from ._load import native as _native
from ._build_info import build_info
from .engine import Engine
from .mod_runs import mod_runs
from .rope import rope_from_comfy

Options = _native.Options
make_checkpoint = _native.make_checkpoint
__version__ = _native.__version__
#: Keys per attention tile: ``Options.kv_block`` is 0 or a multiple of it.
ATTN_KV_TILE = _native.ATTN_KV_TILE


def convrot_quantize(x):
    """The engine's int8 ConvRot activation quantiser over the rows of ``x``
    (bf16 [M, K], K a multiple of 256; a torch tensor, CUDA tensors are copied
    to host, or any DLPack array in host memory). Returns ``(q, scale)``: int8
    [M, K] and float32 [M] torch tensors (numpy arrays for non-torch input),
    bit-exact with comfy-kitchen's CUDA quantiser."""
    try:
        import torch  # only to allocate outputs like the input; never required
    except ImportError:
        torch = None
    if torch is not None and isinstance(x, torch.Tensor):
        xc = x.detach().contiguous().cpu()
        q = torch.empty(xc.shape, dtype=torch.int8)
        scale = torch.empty(xc.shape[:1], dtype=torch.float32)
    else:
        import numpy as np
        xc = x
        q = np.empty(tuple(x.shape), dtype=np.int8)
        scale = np.empty(tuple(x.shape[:1]), dtype=np.float32)
    _native.convrot_quantize(xc, q, scale)
    return q, scale


def has_cuda() -> bool:
    """True when the native module has the CUDA backend and a GPU is visible."""
    return bool(_native.cuda_built()) and _native.cuda_device_count() > 0


def cuda_built() -> bool:
    """True when the native module was built with the CUDA backend."""
    return bool(_native.cuda_built())


__all__ = ["Engine", "Options", "rope_from_comfy", "mod_runs", "make_checkpoint", "convrot_quantize",
           "has_cuda", "cuda_built", "build_info", "ATTN_KV_TILE", "__version__"]
