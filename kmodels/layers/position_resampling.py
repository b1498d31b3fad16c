"""Resampling a table of learned positions to another number of positions.

The weights are a NumPy matrix `(new, old)` built once per size pair and
applied with `keras.ops.matmul`, so every backend computes the same sums:
`keras.ops.image.resize` would interpolate differently on each (TensorFlow,
JAX and torch place and weight their samples in their own ways).
"""

import numpy as np


def linear_weights(old, new):
    """Linear interpolation over positions, `(new, old)` float64 weights.

    Position `i` of `new` samples the old table at
    `(i + 0.5) * old / new - 0.5` (pixel centres, as torch's
    `F.interpolate(mode="linear", align_corners=False)` and timm's
    resampling of position embeddings), clamped to `[0, old - 1]`, between
    its two neighbours. Each row sums to 1; `new == old` is the identity.

    Args:
        old: int >= 1, the positions of the table.
        new: int >= 1, the positions wanted.
    """
    weights = np.zeros((new, old))
    scale = old / new
    for i in range(new):
        source = min(max((i + 0.5) * scale - 0.5, 0.0), old - 1.0)
        low = int(np.floor(source))
        high = min(low + 1, old - 1)
        fraction = source - low
        weights[i, low] += 1.0 - fraction
        weights[i, high] += fraction
    return weights
