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


def _wait(tensor):
    """Blocks until `tensor` is computed: JAX dispatches asynchronously
    (`block_until_ready`); TensorFlow's and torch's eager CPU ops have
    finished when they return."""
    wait = getattr(tensor, "block_until_ready", None)
    if wait is not None:
        wait()


def backend_matmul():
    """The Keras backend's own matrix product, called eagerly, without
    Keras' argument handling around it (a `1 x 1` product on TensorFlow:
    0.26 ms through `keras.ops.matmul`, 0.10 ms through `tf.linalg.matmul`,
    busy machine): `tf.linalg.matmul`,
    `jax.jit(jnp.matmul)` (the XLA dot a compiled step runs) or
    `torch.matmul`."""
    import keras

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.linalg.matmul
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        return jax.jit(jnp.matmul)
    if backend == "torch":
        import torch

        return torch.matmul
    return keras.ops.matmul


def shape_rate(shape, reps=5, min_ms=20.0, clock=None):
    """The GFLOP/s of the backend's own matmul (`backend_matmul`, eager)
    on float32 operands of `shape = (batch, m, k, n)`: `(m, k) @ (k, n)`,
    or `(batch, m, k) @ (batch, k, n)` when `batch > 1`. After two warm-up
    products, each of `reps` timings runs the product back to back (enough
    calls for `min_ms`, as estimated from the warm-up) and waits for the
    last; returns the median of the `reps` rates."""
    import statistics
    import time

    import keras

    clock = clock or time.perf_counter
    batch, m, k, n = shape
    rng = np.random.default_rng(0)
    lead = (batch,) if batch > 1 else ()
    product = backend_matmul()
    a = keras.ops.convert_to_tensor(
        rng.standard_normal(lead + (m, k), dtype=np.float32)
    )
    b = keras.ops.convert_to_tensor(
        rng.standard_normal(lead + (k, n), dtype=np.float32)
    )
    for _ in range(2):
        t0 = clock()
        _wait(product(a, b))
        once = clock() - t0
    calls = max(1, int(min_ms / 1e3 / max(once, 1e-6)))
    rates = []
    for _ in range(reps):
        t0 = clock()
        for _ in range(calls):
            out = product(a, b)
        _wait(out)
        seconds = (clock() - t0) / calls
        rates.append(2 * batch * m * k * n / seconds / 1e9)
    return statistics.median(rates)


def matmul_floor(products, rate=shape_rate):
    """The matmul floor of a step whose matrix products are `products`
    (`benchmarks.flops.seq2seq_train_products`): each distinct shape's
    GFLOP/s measured with `rate(shape)` in this process, then
    `flops.matmul_floor_ms`. Returns `(floor_ms, table)`, `table` one row
    per distinct shape, slowest total first: `{shape: [batch, m, k, n],
    products, flops, gflops, ms}`."""
    rows = {}
    for entry in products:
        shape = flops.shape_of(entry)
        row = rows.setdefault(shape, {"products": 0, "flops": 0})
        row["products"] += entry["count"]
        row["flops"] += entry["flops"]
    rates = {shape: rate(shape) for shape in rows}
    table = [
        {
            "shape": list(shape),
            "products": row["products"],
            "flops": row["flops"],
            "gflops": rates[shape],
            "ms": row["flops"] / rates[shape] / 1e6,
        }
        for shape, row in rows.items()
    ]
    table.sort(key=lambda row: -row["ms"])
    return flops.matmul_floor_ms(products, rates), table
