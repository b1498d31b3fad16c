import numpy as np


def embedding(ids, table):
    """Row lookup: `table[ids]`, shape `ids.shape + (dim,)`.

    Args:
        ids: integer array of any shape, values in `[0, len(table))`.
        table: float array `(rows, dim)`.
    """
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"ids must be integers; got dtype {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= len(table)):
        raise IndexError(
            f"ids must lie in [0, {len(table)}); got [{ids.min()}, {ids.max()}]"
        )
    return np.asarray(table, np.float64)[ids]
