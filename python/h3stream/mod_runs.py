"""ComfyUI's mod_segments -> the engine's (begin, end, mod_row) runs."""

import numbers


def _integer_scalar(row):
    if isinstance(row, bool):
        return False
    if isinstance(row, numbers.Integral):  # int, numpy integers
        return True
    # A 0-d integer torch tensor (or numpy array).
    dims = row.dim() if callable(getattr(row, "dim", None)) else getattr(row, "ndim", None)
    return dims == 0 and _integer_dtype(row)


def _integer_dtype(a):
    name = str(getattr(a, "dtype", ""))
    return any(name.endswith(t) for t in ("int64", "int32", "int16", "int8", "uint8"))


def _per_token_runs(where, a, b, row):
    """(begin, end, mod_row) runs of a span whose row is one mod-row index per token."""
    n = b - a
    if isinstance(row, (list, tuple)):
        values = list(row)
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in values):
            raise TypeError(f"{where}: the row is a {type(row).__name__} but not of integer "
                            "mod-row indices (e.g. a blend of rows): h3stream takes an int or "
                            "one integer index per token")
    elif hasattr(row, "shape") and _integer_dtype(row):
        if len(row.shape) != 1:
            raise TypeError(f"{where}: per-token mod rows must be 1-D, got shape "
                            f"{list(row.shape)}")
        if row.shape[0] != n:
            raise ValueError(f"{where}: {row.shape[0]} per-token mod rows for a span of {n} "
                             "tokens")
        if n == 0:
            return []
        if callable(getattr(row, "is_floating_point", None)):  # torch: stay on its device
            change = row[1:] != row[:-1]
            starts = [0] + [int(i) + 1 for i in change.nonzero().flatten().tolist()]
            values = [int(row[0])] + row[1:][change].tolist()
        else:  # numpy
            import numpy as np

            change = np.flatnonzero(row[1:] != row[:-1]) + 1
            starts = [0] + change.tolist()
            values = row[[0] + change.tolist()].tolist()
        ends = starts[1:] + [n]
        return [(a + s, a + e, int(v)) for s, e, v in zip(starts, ends, values)]
    else:
        raise TypeError(f"{where}: the row is a {type(row).__name__} (dtype "
                        f"{getattr(row, 'dtype', None)}), not an int or one integer mod-row "
                        "index per token")
    if len(values) != n:
        raise ValueError(f"{where}: {len(values)} per-token mod rows for a span of {n} tokens")
    runs = []
    for i, v in enumerate(values):
        if runs and runs[-1][2] == v:
            runs[-1] = (runs[-1][0], a + i + 1, v)
        else:
            runs.append((a + i, a + i + 1, int(v)))
    return runs


def mod_runs(mod_segments, name="mod_segments"):
    """ComfyUI's ``mod_segments`` as ``Engine.run_block``'s ``(begin, end, mod_row)`` int runs.

    A segment's row is an int, or (ComfyUI with a partial denoise mask) one mod-row
    index per token of the span: a 1-D integer torch tensor, numpy array or list of
    ``end - begin`` indices, split here into runs of equal rows. Each token keeps its
    row, so the block computes the same bits as with those runs given by hand. Any
    other row (a blend of rows, float weights) raises TypeError naming the segment; a
    per-token row of the wrong length raises ValueError (errors name the segment as
    ``name[i]``). The engine checks the runs cover the sequence and index its time
    embeddings.
    """
    runs = []
    for i, seg in enumerate(mod_segments):
        where = f"{name}[{i}]"
        try:
            a, b, row = seg
            a, b = int(a), int(b)
        except (TypeError, ValueError):
            raise TypeError(f"{where}: expected a (begin, end, mod_row) triple, got "
                            f"{type(seg).__name__} {seg!r:.60}") from None
        if _integer_scalar(row):
            runs.append((a, b, int(row)))
        else:
            runs.extend(_per_token_runs(where, a, b, row))
    return runs
