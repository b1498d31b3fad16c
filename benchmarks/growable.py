"""Embedding tables: kmodels' GrowableEmbedding next to
`keras.layers.Embedding` at 10k and 1M rows, and the cost of one growth."""

import time

import numpy as np

from benchmarks.child import NotAvailable, require
from benchmarks.timing import measure, summarize


def _batch(sizes, high=None):
    rng = np.random.default_rng(0)
    high = sizes["rows"] if high is None else high
    ids = rng.integers(0, high, size=(sizes["batch"], sizes["ids"]))
    target = rng.standard_normal((sizes["batch"], 1)).astype("float32")
    return ids.astype("int32"), target


def _model(embedding, sizes):
    """ids `(batch, ids)` -> embedding -> mean over ids -> Dense(1)."""
    import keras

    inputs = keras.Input((sizes["ids"],), dtype="int32")
    x = keras.layers.GlobalAveragePooling1D()(embedding(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(x))
    model.compile(optimizer="adam", loss="mse")
    return model


def keras_embedding(sizes, timing):
    """`keras.layers.Embedding(rows, dim)` + Adam: dense gradient and dense
    Adam update over every row."""
    import keras

    keras.utils.set_random_seed(0)
    model = _model(keras.layers.Embedding(sizes["rows"], sizes["dim"]), sizes)
    ids, target = _batch(sizes)
    stats = measure(lambda: model.train_on_batch(ids, target), **timing)
    return dict(stats, flops=0)


def _growable(sizes):
    import keras

    GrowableEmbedding = require("kmodels.layers", "GrowableEmbedding")
    keras.utils.set_random_seed(0)
    return GrowableEmbedding(sizes["dim"], initial_capacity=sizes["rows"])


def growable_embedding(sizes, timing):
    """`kmodels.layers.GrowableEmbedding(dim, initial_capacity=rows)` + Adam,
    ids within capacity (no growth during timing)."""
    layer = _growable(sizes)
    model = _model(layer, sizes)
    ids, target = _batch(sizes)
    stats = measure(lambda: model.train_on_batch(ids, target), **timing)
    return dict(stats, flops=0)


_GROW_METHODS = ("grow", "ensure_capacity", "maybe_grow", "resize")


def growth_event(sizes, timing):
    """One growth (capacity `rows` -> at least `2 * rows`) between steps:
    the time of the growth call plus the first train step after it (which
    includes the recompilation), minus the median steady step."""
    layer = _growable(sizes)
    model = _model(layer, sizes)
    ids, target = _batch(sizes)
    steady = measure(lambda: model.train_on_batch(ids, target), **timing)
    grow = next(
        (getattr(layer, m) for m in _GROW_METHODS if hasattr(layer, m)), None
    )
    if grow is None:
        raise NotAvailable(
            f"GrowableEmbedding has none of {_GROW_METHODS}: growth API unknown"
        )
    new_ids, _ = _batch(sizes, high=2 * sizes["rows"])
    t0 = time.perf_counter()
    grow(2 * sizes["rows"])
    model.train_on_batch(new_ids, target)
    event = time.perf_counter() - t0
    result = summarize([event])
    result["steady_median_ms"] = steady["median_ms"]
    result["growth_cost_ms"] = result["median_ms"] - steady["median_ms"]
    return dict(result, flops=0)
