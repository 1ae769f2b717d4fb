"""ComfyUI's RoPE rotation table -> the engine's (cos, sin) table."""


def rope_from_comfy(rope_freqs):
    """Convert ComfyUI's ``rope_rotation_table`` output to ``Engine.run_block``'s rope.

    ``rope_freqs`` is ``[1, S, 1, rot/2, 2, 2]``, each 2x2 block
    ``[[cos, -sin], [sin, cos]]``; the engine reads ``[S, rot/2, 2]`` as
    ``(cos, sin)`` pairs, i.e. column 0 of each block. The values are taken
    as they are (no arithmetic), in the table's dtype, so they are the bits
    ComfyUI's kernel reads; ``run_block`` needs bf16. Works on torch tensors
    and numpy arrays; the result is a new contiguous array of S x rot/2 x 2
    elements (small: compute it once per forward, not per block).
    """
    shape = tuple(rope_freqs.shape)
    if len(shape) != 6 or shape[0] != 1 or shape[2] != 1 or shape[4:] != (2, 2):
        raise ValueError(
            f"rope_freqs: shape {list(shape)} is not ComfyUI's [1, S, 1, rot/2, 2, 2] rotation table"
        )
    pairs = rope_freqs[0, :, 0, :, :, 0]  # [S, rot/2, 2]: (cos, sin)
    if hasattr(pairs, "contiguous"):  # torch
        return pairs.contiguous()
    import numpy as np

    return np.ascontiguousarray(pairs)
