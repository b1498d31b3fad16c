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

On JAX a table under `EmbeddingGrowth` also has a first reserve before it
grows (`first_reserve`): up to FIRST_RESERVE_ROWS rows within
FIRST_RESERVE_BYTES of table, so that a small table growing into it (a
recommender's users and items arriving) compiles its train step once, not
once per reserve (2026-12-07, the MovieLens-shaped stream: 1 XLA
compilation per pass instead of 2-3; docs/growable_embedding.md).
"""

import math

import numpy as np

RESERVE_LIMIT = 4.0
RESERVE_BYTES = 64 * 2**20
# The first reserve (JAX): at most this many rows and bytes of table (its
# optimizer slots and `trained_at` add to it). 0 turns it off.
FIRST_RESERVE_BYTES = 2**20
FIRST_RESERVE_ROWS = 4096


def _row_bytes(layer):
    """The bytes of one row of `layer`'s table (at least 1)."""
    itemsize = np.dtype(layer.variable_dtype).itemsize
    return max(layer.output_dim * itemsize, 1)


def next_reserve(layer, capacity):
    """The rows of `layer`'s next reserve, from its `capacity`."""
    count = layer.__dict__.get("_kmodels_reserves", 0) + 1
    layer.__dict__["_kmodels_reserves"] = count
    factor = min(float(layer.growth_factor) ** 2, RESERVE_LIMIT)
    rows = int(math.ceil(capacity * factor))
    budget = max(rows, RESERVE_BYTES // _row_bytes(layer))
    rows = min(int(math.ceil(capacity * factor**count)), budget)
    limit = layer.row_limit
    if limit is not None:
        # A table with a row limit (`max_capacity`, a bounded key index)
        # reserves up to it when that fits the budget: it never
        # reallocates again.
        limit = max(int(limit), capacity)
        rows = limit if limit <= budget else min(rows, limit)
    return rows


def first_reserve(layer, capacity):
    """The rows of `layer`'s reserve before its first growth: its
    `capacity`, or FIRST_RESERVE_ROWS when more, within FIRST_RESERVE_BYTES
    of table and the layer's row limit."""
    rows = min(FIRST_RESERVE_BYTES // _row_bytes(layer), FIRST_RESERVE_ROWS)
    limit = layer.row_limit
    if limit is not None:
        rows = min(rows, int(limit))
    return max(int(capacity), int(rows))


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
