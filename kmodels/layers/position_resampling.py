"""Resampling a table of learned positions to another number of positions.

The weights are NumPy matrices `(new, old)`, applied to the table once, in
float64 NumPy, so every backend gets the same table: `keras.ops.image.resize`
would interpolate differently on each (TensorFlow, JAX and torch place and
weight their samples in their own ways).
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


def _cubic(x, a):
    # Keys' cubic convolution kernel; torch's bicubic uses a = -0.75.
    x = abs(x)
    if x <= 1.0:
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    if x < 2.0:
        return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return 0.0


def cubic_weights(old, new, a=-0.75):
    """Bicubic interpolation along one axis, `(new, old)` float64 weights.

    Output `i` samples at `(i + 0.5) * old / new - 0.5` (pixel centres) with
    the four neighbours `floor(x) - 1 ... floor(x) + 2`, indices clamped to
    the table, as torch's `F.interpolate(mode="bicubic",
    align_corners=False)` (timm's default for position grids). Each row sums
    to 1; `new == old` is the identity.

    Args:
        old: int >= 1, the positions along the axis.
        new: int >= 1, the positions wanted.
        a: float, the kernel's parameter. Defaults to torch's `-0.75`.
    """
    weights = np.zeros((new, old))
    scale = old / new
    for i in range(new):
        source = (i + 0.5) * scale - 0.5
        first = int(np.floor(source))
        fraction = source - first
        for k in range(-1, 3):
            index = min(max(first + k, 0), old - 1)
            weights[i, index] += _cubic(k - fraction, a)
    return weights


def resample_grid(table, old_grid, new_grid):
    """A `(rows * cols, dim)` table of a row-major grid, resampled bicubic
    to `new_grid`, in float64 NumPy: `(new_rows * new_cols, dim)`."""
    rows, cols = old_grid
    new_rows, new_cols = new_grid
    grid = np.asarray(table, np.float64).reshape(rows, cols, -1)
    out = np.einsum(
        "ih,jw,hwd->ijd",
        cubic_weights(rows, new_rows),
        cubic_weights(cols, new_cols),
        grid,
    )
    return out.reshape(new_rows * new_cols, -1)
