"""The row initializer of `GrowableEmbedding`: row `i` starts from values
that depend only on `(seed, i)`, never on the table's capacity nor on when
the row is drawn, so a grown table equals a pre-sized one.

Each value comes from a counter-based hash (SplitMix64) of the seed, the row
and the column, in NumPy, the same on every backend.
"""

import numpy as np

# `row_uniform` hashes `2 * seed + stream` in 64 bits: distinct up to here.
MAX_SEED = 2**63 - 1
_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def splitmix64(z):
    """SplitMix64 finaliser (Steele et al., 2014), vectorised, wrapping."""
    with np.errstate(over="ignore"):
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return (z ^ (z >> np.uint64(31))) & _MASK64


def row_uniform(seed, rows, dim, stream=0):
    """Uniform [0, 1) draws for the integer array of `rows`, each a
    function of (seed, row, column) only, so a row's values never depend
    on the table's size nor on when the row is drawn."""
    rows = np.asarray(rows).astype(np.uint64).reshape(-1, 1)
    cols = np.arange(dim, dtype=np.uint64)[None, :]
    with np.errstate(over="ignore"):
        key = splitmix64(
            np.uint64(seed) * np.uint64(2) + np.uint64(stream) + rows * 0
        )
        z = splitmix64(key ^ (rows * np.uint64(dim) + cols))
    return ((z >> np.uint64(40)).astype(np.float64) + 0.5) / 2.0**24


class RowInitializer:
    """The distribution of a Keras initializer, drawn row by row.

    Args:
        initializer: a `keras.initializers.Zeros`, `RandomUniform` or
            `RandomNormal` (its own seed is not used). Others raise a
            `ValueError`: their values depend on the whole shape.
    """

    def __init__(self, initializer):
        name = type(initializer).__name__
        if name == "Zeros":
            self.kind, self.args = "zeros", ()
        elif name == "RandomUniform":
            self.kind = "uniform"
            self.args = (initializer.minval, initializer.maxval)
        elif name == "RandomNormal":
            self.kind = "normal"
            self.args = (initializer.mean, initializer.stddev)
        else:
            raise ValueError(
                "GrowableEmbedding draws rows one by one so that growth never "
                "changes them; embeddings_initializer must be 'uniform', "
                "'normal', 'zeros' or a keras.initializers.RandomUniform / "
                f"RandomNormal / Zeros; got {name}."
            )

    def __call__(self, seed, rows, dim):
        """Float64 values `(len(rows), dim)` of the integer array of
        `rows`, drawn from `seed`."""
        if self.kind == "zeros":
            return np.zeros((len(rows), dim))
        if self.kind == "uniform":
            low, high = self.args
            return low + (high - low) * row_uniform(seed, rows, dim)
        # normal: Box-Muller on two independent streams
        mean, stddev = self.args
        u1 = row_uniform(seed, rows, dim, stream=0)
        u2 = row_uniform(seed, rows, dim, stream=1)
        return mean + stddev * np.sqrt(-2.0 * np.log(u1)) * np.cos(
            2.0 * np.pi * u2
        )
