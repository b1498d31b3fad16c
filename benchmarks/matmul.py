"""The machine's limit: float32 matrix product throughput."""

import numpy as np

from benchmarks import flops
from benchmarks.timing import measure


def _operands(n):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    return a, b


def numpy_matmul(sizes, timing):
    """`a @ b` with NumPy's BLAS (float32, square `n`)."""
    a, b = _operands(sizes["n"])
    stats = measure(lambda: a @ b, **timing)
    return dict(stats, flops=flops.matmul(sizes["n"]))


def keras_matmul(sizes, timing):
    """`keras.ops.matmul` on backend tensors, waited for by reading one
    element back (the element copy is negligible next to `2 n^3` FLOPs)."""
    import keras

    a, b = (keras.ops.convert_to_tensor(x) for x in _operands(sizes["n"]))

    def step():
        return keras.ops.convert_to_numpy(keras.ops.matmul(a, b)[0, 0])

    stats = measure(step, **timing)
    return dict(stats, flops=flops.matmul(sizes["n"]))
