"""The reserve of a `GrowableEmbedding` table under `EmbeddingGrowth`, on
every backend: rows held past the capacity with the values fresh rows start
from, so that a growth within them changes values only (JAX: the padded
state of the compiled step; torch: the buffer the variables view; TensorFlow:
the fresh rows, computed once per reserve).

A growth past the last reserve sets the next: `min(growth_factor ** 2,
RESERVE_LIMIT)` times the capacity (two more growths), raised to the power
`k` at a table's `k`-th reserve, so that a table that keeps outgrowing its
reserve (a stream) reallocates a logarithmic number of times in its final
size: 4x, 16x, 64x... As long as the reserve stays within RESERVE_BYTES;
past that, it stays at the first multiple (memory).
"""

import math

import numpy as np

RESERVE_LIMIT = 4.0
RESERVE_BYTES = 64 * 2**20


def next_reserve(layer, capacity):
    """The rows of `layer`'s next reserve, from its `capacity`."""
    count = layer.__dict__.get("_kmodels_reserves", 0) + 1
    layer.__dict__["_kmodels_reserves"] = count
    factor = min(float(layer.growth_factor) ** 2, RESERVE_LIMIT)
    rows = int(math.ceil(capacity * factor))
    row_bytes = layer.output_dim * np.dtype(layer.variable_dtype).itemsize
    budget = max(rows, RESERVE_BYTES // max(row_bytes, 1))
    rows = min(int(math.ceil(capacity * factor**count)), budget)
    limit = layer.row_limit
    if limit is not None:
        # A table with a row limit (`max_capacity`, a bounded key index)
        # reserves up to it when that fits the budget: it never
        # reallocates again.
        limit = max(int(limit), capacity)
        rows = limit if limit <= budget else min(rows, limit)
    return rows


def grown_variables(layer):
    """The variables with a row per id: the table, the slots in use and
    `trained_at`."""
    capacity = layer.capacity
    return [
        v
        for v in (layer.embeddings, *layer.slot_variables, layer.trained_at)
        if int(v.shape[0]) == capacity
    ]


def fresh_rows(layer, variable, start, stop):
    """`layer.fresh_rows(variable, start, stop)`, kept for later rows up
    to `stop` (a reserve: each growth within it, and on JAX each `fit`,
    takes a tail of them)."""
    cache = layer.__dict__.setdefault("_kmodels_fresh_rows", {})
    key = (variable.path, stop)
    cached = cache.get(key)
    if cached is None or cached[0] > start:
        if len(cache) > 16:
            cache.clear()
        cached = cache[key] = (start, layer.fresh_rows(variable, start, stop))
    first, rows = cached
    return rows[start - first :]
