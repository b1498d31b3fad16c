"""Embedding tables: kmodels' GrowableEmbedding next to
`keras.layers.Embedding` at 10k and 1M rows, the cost of one growth, and
the cost of restarting the rows a bounded `KeyIndex` evicted in one step."""

import contextlib
import time

import numpy as np

from benchmarks.child import require
from benchmarks.timing import measure
from benchmarks.timing import summarize


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


def growth_event(sizes, timing):
    """One growth between steps inside `model.fit` with
    `kmodels.callbacks.EmbeddingGrowth`: a one-batch `fit` whose batch holds one
    id past the capacity (one growth, the step recompiles) minus the same
    one-batch `fit` without a new id. Reported: the growth fits' times, the
    steady fits' median and their difference (`growth_cost_ms`), and
    where it goes, medians over the growth fits (`_growth_breakdown`):
    `grow_ms`, the growth itself (new rows and slots written, before the
    step); on JAX `trace_ms` and `compile_ms`, the retrace and the XLA
    compilation of the step for the new shapes; and `recompilations`,
    the growth fits whose step recompiled (`EmbeddingGrowth`'s count)."""
    EmbeddingGrowth = require("kmodels.callbacks", "EmbeddingGrowth")

    class TimedGrowth(EmbeddingGrowth):
        def apply(self, plan):
            t0 = time.perf_counter()
            super().apply(plan)
            _block(layer)
            spent["grow"] += time.perf_counter() - t0

    spent = {}
    layer = _growable(sizes)
    model = _model(layer, sizes)
    ids, target = _batch(sizes)

    def fit(x):
        growth = TimedGrowth()
        t0 = time.perf_counter()
        model.fit(
            x,
            target,
            batch_size=len(x),
            epochs=1,
            shuffle=False,
            verbose=0,
            callbacks=[growth],
        )
        spent["recompilations"] = growth.recompilations
        return time.perf_counter() - t0

    fit(ids)  # compiles
    repeats = max(1, min(3, timing["min_steps"]))
    steady = summarize([fit(ids) for _ in range(repeats)])
    grown, capacities, parts = [], [layer.capacity], []
    for _ in range(repeats):
        new_ids = ids.copy()
        new_ids[0, 0] = layer.capacity  # one id past the end: one growth
        spent.clear()
        spent.update(grow=0.0, trace=0.0, compile=0.0)
        with _compile_timer(spent):
            grown.append(fit(new_ids))
        parts.append(dict(spent))
        capacities.append(layer.capacity)
    if len(set(capacities)) != len(capacities):
        raise RuntimeError(f"the table did not grow: capacities {capacities}")
    result = summarize(grown)
    result["steady_median_ms"] = steady["median_ms"]
    result["growth_cost_ms"] = result["median_ms"] - steady["median_ms"]
    result["capacities"] = capacities
    result.update(_growth_breakdown(parts))
    # Growth fits whose step recompiled (on JAX a growth within the
    # table's reserve does not: docs/growable_embedding.md).
    result["recompilations"] = sum(p["recompilations"] for p in parts)
    return dict(result, flops=0)


def _growth_breakdown(parts):
    """Medians, in ms, of the per-fit seconds in `parts`: `grow_ms`, and
    on JAX `trace_ms` and `compile_ms` (`None` elsewhere)."""
    import keras

    jax = keras.backend.backend() == "jax"
    out = {}
    for name in ("grow", "trace", "compile"):
        if name == "grow" or jax:
            out[f"{name}_ms"] = summarize([p[name] for p in parts])["median_ms"]
        else:
            out[f"{name}_ms"] = None
    return out


def _block(layer):
    # JAX dispatches asynchronously: wait for the grown table and slots.
    for variable in (layer.embeddings, *layer.slot_variables):
        getattr(variable.value, "block_until_ready", lambda: None)()


@contextlib.contextmanager
def _compile_timer(spent):
    """On JAX, adds the seconds JAX reports for tracing (jaxpr and MLIR)
    and XLA compilation inside the scope to `spent["trace"]` and
    `spent["compile"]` (`jax.monitoring` events); elsewhere does nothing."""
    import keras

    if keras.backend.backend() != "jax":
        yield
        return
    import jax

    kinds = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "trace",
        "/jax/core/compile/backend_compile_duration": "compile",
    }

    def listen(event, seconds, **kwargs):
        if event in kinds:
            spent[kinds[event]] += seconds

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def eviction_reset(sizes, timing):
    """Restarting the rows a bounded index evicted in one step: a full
    `KeyIndex(max_capacity=rows, eviction="lru")` looks up a batch of
    `batch * ids` new keys (each evicts one key), then
    `GrowableEmbedding.reset_rows(index.take_reset_rows())` writes those
    rows (initial values, Adam slots at zero), as `EmbeddingGrowth` does
    between steps. Reported: the reset's time per step (blocking until
    written), and the index lookup's beside it (`lookup_median_ms`). The
    reset costs in proportion to the rows reset, not to the table: the
    same at 1k and 1M rows."""
    import keras

    GrowableEmbedding, KeyIndex = require(
        "kmodels.layers", "GrowableEmbedding", "KeyIndex"
    )
    rows = sizes["rows"]
    per_step = sizes["batch"] * sizes["ids"]
    if per_step >= rows:
        raise ValueError(
            f"eviction_reset needs fewer keys per step ({per_step}) than "
            f"rows ({rows})."
        )
    keras.utils.set_random_seed(0)
    index = KeyIndex(max_capacity=rows, eviction="lru")
    layer = GrowableEmbedding(
        sizes["dim"], initial_capacity=rows, key_index=index
    )
    layer.build()
    index.lookup(np.arange(rows - 1))  # full
    index.take_reset_rows()
    first = [rows]

    def evict():
        keys = np.arange(first[0], first[0] + per_step)
        first[0] += per_step
        t0 = time.perf_counter()
        index.lookup(keys)
        lookup = time.perf_counter() - t0
        evicted = index.take_reset_rows()
        if len(evicted) != per_step:
            raise RuntimeError(
                f"expected {per_step} evicted rows; got {len(evicted)}"
            )
        return evicted, lookup

    def reset(evicted):
        t0 = time.perf_counter()
        layer.reset_rows(evicted)
        # JAX dispatches asynchronously: wait for the writes. (A read of
        # the table would cost more than the reset on TensorFlow, which
        # copies a variable whole on a dense read after sparse writes.)
        for variable in (layer.embeddings, *layer.slot_variables):
            getattr(variable.value, "block_until_ready", lambda: None)()
        return time.perf_counter() - t0

    for _ in range(timing["warmup"]):
        reset(evict()[0])
    times, lookups = [], []
    start = time.perf_counter()
    while len(times) < timing["max_steps"]:
        evicted, lookup = evict()
        times.append(reset(evicted))
        lookups.append(lookup)
        if (
            len(times) >= timing["min_steps"]
            and time.perf_counter() - start > timing["max_seconds"]
        ):
            break
    result = summarize(times)
    result["lookup_median_ms"] = summarize(lookups)["median_ms"]
    result["rows_reset_per_step"] = per_step
    return dict(result, flops=0)
