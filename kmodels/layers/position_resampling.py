"""Resampling a table of learned positions to another number of positions.

The weights are matrices `(new, old)` written from the formulas below, so
every backend gets the same numbers: `keras.ops.image.resize` would
interpolate differently on each (TensorFlow, JAX and torch place and weight
their samples in their own ways). `PositionalEmbedding.resized` applies them
once, in float64 NumPy; a `PositionalEmbedding` around a `PatchEmbedding`
with `dynamic_image_size=True` applies them at every call, as NumPy
constants when the grid is known at trace time, else as the tensors of
`cubic_weights_tensor` (TensorFlow traces sizes it does not know).
"""

import numpy as np
from keras import ops


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


def _cubic_tensor(x, a):
    # `_cubic` with keras.ops, elementwise.
    x = ops.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    far = ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    return ops.where(x <= 1.0, near, ops.where(x < 2.0, far, 0.0))


def cubic_weights_tensor(old, new, dtype="float32", a=-0.75):
    """`cubic_weights(old, new)` computed with `keras.ops`, for a `new`
    known only when the graph runs: `(new, old)` weights of `dtype`.

    The same sampling positions and kernel as `cubic_weights`, in `dtype`
    arithmetic (float32: ~1e-7 from the float64 matrix); `new == old` is
    the identity exactly.

    Args:
        old: int >= 1, the positions along the axis (a Python int: the
            trained grid).
        new: int >= 1 or a scalar int tensor, the positions wanted.
        dtype: float dtype of the weights. Defaults to `"float32"`.
        a: float, the kernel's parameter. Defaults to torch's `-0.75`.
    """
    scale = old / ops.cast(new, dtype)
    source = (ops.cast(ops.arange(new), dtype) + 0.5) * scale - 0.5
    first = ops.floor(source)
    fraction = source - first
    # The four neighbours at once, (new, 4): few ops, few kernels to
    # compile where ops run one by one (eager JAX).
    offsets = ops.convert_to_tensor(np.arange(-1, 3, dtype="int32"))
    index = ops.clip(ops.cast(first, "int32")[:, None] + offsets, 0, old - 1)
    weight = _cubic_tensor(ops.cast(offsets, dtype) - fraction[:, None], a)
    return ops.sum(ops.one_hot(index, old, dtype=dtype) * weight[..., None], 1)


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
