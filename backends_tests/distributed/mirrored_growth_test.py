"""`GrowableEmbedding` grows and trains under tf.distribute.MirroredStrategy.

TensorFlow, 2 and 4 virtual CPU replicas: `model.fit` with
`EmbeddingGrowth`, an unbounded table with its own sparse Adam and a
bounded one (`KeyIndex(max_capacity=64, eviction="lru")`, keys looked up in
the data pipeline, evicted rows restarted) with sparse SGD with momentum,
ends with every component of the table, of its optimizer slots and of its
step equal to one-device training on the same global batches (within
1e-5), the components of every replica identical to each other (exactly),
the same growth log and restarted rows, the same dense weights. Keys new
to the table sit in one replica's slice of their batch (the last example
of a batch carries the largest id). The unbounded run's last batch splits
unevenly over 4 replicas (2-2-2-0): Keras then weighs the examples of each
slice by `batch / (replicas * slice)`, and the oracle is one device with
those sample weights. The bounded model saves under the strategy and
loads without it, as trained.

JAX and torch: `tf.distribute` is a TensorFlow API that Keras there
ignores (their variables are not TensorFlow variables); one test pins that
a growing, bounded table trains under a strategy scope exactly as without.
"""

import contextlib

import keras
import numpy as np
import pytest

from backends_tests.distributed.conftest import mirrored_strategy
from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex

BACKEND = keras.backend.backend()
TENSORFLOW_ONLY = pytest.mark.skipif(
    BACKEND != "tensorflow",
    reason=(
        "tf.distribute is TensorFlow's; on JAX and torch Keras ignores its "
        "scope (test_mirrored_scope_is_ignored_off_tensorflow pins that); "
        "their multi-device growth is keras.distribution (JAX) or DDP"
    ),
)
# float32 on both sides; the replicas sum each row's gradients over the
# gathered global batch in another order than one device does (a few ulps),
# and Adam divides by sqrt(v): measured differences are below 1e-7.
ATOL = 1e-5
# Unbounded: 6 steps; the last batch, 6, splits 3-3 over 2 replicas and
# 2-2-2-0 over 4 (TensorFlow's split).
EXAMPLES, BATCH = 46, 8
# Bounded: 24 batches of HOT keys and cold ones; the index's 64 rows hold
# 59 cold keys past the hot ones and the reserved row 0: 14 batches' worth.
BOUNDED_STEPS, HOT, ROWS, HELD = 24, 4, 64, 14


def _unbounded_data(examples=EXAMPLES):
    # Example i draws ids below 3 + i: the table grows 4 -> 8 -> 16 -> 32
    # -> 64 while it trains; the largest id of each batch is new and sits in
    # its last example, i.e. in the last replica's slice only.
    rng = np.random.default_rng(0)
    x = np.stack([rng.integers(0, 3 + i, 3) for i in range(examples)])
    x[:, 0] = 2 + np.arange(examples)
    y = rng.normal(size=(examples, 1))
    return x.astype("int32"), y.astype("float32")


def _bounded_batches():
    # Each batch: the HOT keys (never evicted by LRU) and cold keys seen
    # once. A cold key is evicted 14 batches after its only use: exact as
    # long as fit fetches fewer batches ahead (checked: under the strategy
    # tf.data prefetches up to 8 batches; one device: 1).
    rng = np.random.default_rng(1)
    batches = []
    for step in range(BOUNDED_STEPS):
        cold = 10**9 + step * BATCH + np.arange(BATCH - HOT)
        keys = np.concatenate([np.arange(HOT) + 7, cold])
        batches.append((keys, rng.normal(size=(BATCH, 1)).astype("float32")))
    return batches


def _model(table):
    ids = keras.Input((None,), dtype="int32")
    summed = keras.ops.sum(table(ids), axis=1)
    outputs = keras.layers.Dense(1, name="dense")(summed)
    model = keras.Model(ids, outputs)
    model.compile(keras.optimizers.Adam(0.05), loss="mse")
    return model


def _components(variable):
    """Each replica's copy of a Keras variable (one for a plain one)."""
    import tensorflow as tf

    storage = variable.value
    if isinstance(storage, tf.distribute.DistributedValues):
        parts = storage.distribute_strategy.experimental_local_results(storage)
    else:
        parts = [storage]
    return [np.asarray(keras.ops.convert_to_numpy(p)) for p in parts]


def _train(kind, replicas, examples=EXAMPLES, sample_weight=None):
    """Trains the `kind` ("unbounded" or "bounded") case on `replicas`
    MirroredStrategy replicas (`None`: one device, no strategy)."""
    keras.utils.clear_session()
    keras.utils.set_random_seed(1)
    strategy = mirrored_strategy(replicas) if replicas else None
    scope = strategy.scope() if strategy else contextlib.nullcontext()
    with scope:
        if kind == "unbounded":
            index = None
            table = GrowableEmbedding(
                4, initial_capacity=4, seed=3, name="table",
                optimizer=("adam", {"learning_rate": 0.05}),
            )  # fmt: skip
        else:
            index = KeyIndex(max_capacity=ROWS, eviction="lru")
            table = GrowableEmbedding(
                4, initial_capacity=4, seed=3, name="table", key_index=index,
                optimizer=("sgd", {"learning_rate": 0.1, "momentum": 0.9}),
            )  # fmt: skip
        model = _model(table)
    growth, ahead = EmbeddingGrowth(), _Ahead()
    if kind == "unbounded":
        x, y = _unbounded_data(examples)
        data = dict(x=x, y=y, batch_size=BATCH, sample_weight=sample_weight)
    else:
        batches = _bounded_batches()

        def generator():
            # The data pipeline looks keys up batch by batch.
            for keys, target in batches:
                ahead.fetched += 1
                yield index.lookup(keys).reshape(-1, 1).astype("int32"), target

        data = dict(x=_dataset(generator), steps_per_epoch=len(batches))
    history = model.fit(
        **data, epochs=1, shuffle=False, verbose=0, callbacks=[growth, ahead]
    )
    state = {
        v.name: _components(v)
        for v in [table.embeddings, *table.trained_slots, table.step]
    }
    growth.ahead = ahead.most
    return model, table, index, growth, state, history.history


def _dataset(generator):
    """`generator` as a `tf.data.Dataset` whose batch dimension is known.
    MirroredStrategy splits a global batch over the replicas only when
    its size is static; Keras turns a Python generator into batches of
    unknown size, and TensorFlow then hands each replica a whole batch
    of its own (a global batch of `replicas` generator batches)."""
    import tensorflow as tf

    return tf.data.Dataset.from_generator(
        generator,
        output_signature=(
            tf.TensorSpec((BATCH, 1), tf.int32),
            tf.TensorSpec((BATCH, 1), tf.float32),
        ),
    )


class _Ahead(keras.callbacks.Callback):
    """The most batches the pipeline fetched past the one training."""

    fetched = most = 0

    def on_train_batch_begin(self, batch, logs=None):
        self.most = max(self.most, self.fetched - 1 - batch)


_ONE_DEVICE = {}


def _one_device(kind, weights=None):
    key = (kind, None if weights is None else tuple(weights.tolist()))
    if key not in _ONE_DEVICE:
        _ONE_DEVICE[key] = _train(kind, None, sample_weight=weights)
    return _ONE_DEVICE[key]


def _replica_weights(replicas):
    """The weight Keras gives each example under `replicas` replicas,
    relative to one device: it divides each replica's mean loss by the
    replica count, so an example of a slice of `n` in a batch of `b`
    counts `b / (replicas n)` (1 when the batch splits evenly). The
    slices are read from TensorFlow's own split of the batched examples,
    as `fit` distributes NumPy data."""
    import tensorflow as tf

    strategy = mirrored_strategy(replicas)
    dataset = tf.data.Dataset.range(EXAMPLES).batch(BATCH)
    weights = []
    for batch in strategy.experimental_distribute_dataset(dataset):
        parts = strategy.experimental_local_results(batch)
        sizes = [int(part.shape[0]) for part in parts]
        for n in sizes:
            weights += [sum(sizes) / (replicas * max(n, 1))] * n
    return np.asarray(weights, "float32")


@TENSORFLOW_ONLY
@pytest.mark.parametrize("kind", ["unbounded", "bounded"])
@pytest.mark.parametrize("replicas", [2, 4])
def test_mirrored_growth_matches_one_device_on_every_replica(
    device_count, replicas, kind, tmp_path
):
    weights = None
    if kind == "unbounded":
        # Keras weighs the examples of an uneven split: 2-2-2-0 gives the
        # last batch's examples 6 / (4 * 2) = 0.75 of their one-device
        # weight, for every weight of the model (the dense layer and the
        # table alike). The oracle: one device with those weights.
        weights = _replica_weights(replicas)
        assert weights.shape == (EXAMPLES,)
        np.testing.assert_array_equal(weights[:40], 1.0)
        if replicas == 4:
            np.testing.assert_array_equal(weights[40:], 0.75)
            # The weights matter: without them one device ends elsewhere.
            plain = _one_device(kind)[4]["embeddings"][0]
            weighted = _one_device(kind, weights)[4]["embeddings"][0]
            assert np.abs(plain - weighted).max() > 1e-3
    one = _one_device(kind, weights)
    many = _train(kind, replicas)
    model, table, index, growth, state, history = many
    assert model.distribute_strategy.num_replicas_in_sync == replicas
    _, one_table, one_index, one_growth, one_state, one_history = one
    expected_slots = (
        ["momentum", "velocity"] if kind == "unbounded" else ["momentum"]
    )
    assert sorted(state) == sorted(["embeddings", "step", *expected_slots])
    if kind == "unbounded":
        # Largest ids per batch 9, 17, 25, 33, 41, 47: 4 -> 16 -> 32 -> 64.
        # (Examples 41-45 of the last batch land on replicas 0-2 only.)
        assert [e["to"] for e in growth.log] == [16, 32, 64]
    else:
        # Rows 1-8 in the first batch (16), then 32 and the index's 64
        # rows; 100 distinct keys (4 hot, 24 * 4 cold) for 63 rows: 37
        # evictions, each restarting its row once.
        assert [e["to"] for e in growth.log] == [16, 32, 64]
        assert index.evictions == one_index.evictions == 37
        assert growth.ahead < HELD and one_growth.ahead < HELD
        assert growth.evicted_resets == index.evictions
        assert list(index.keys()) == list(one_index.keys())
    assert growth.log == one_growth.log
    # Restarts follow the lookups, which run further ahead under the
    # strategy: the same rows, possibly before other steps.
    reset = [
        sorted(np.concatenate([[], *(e["rows"] for e in g.reset_log)]))
        for g in (growth, one_growth)
    ]
    assert reset[0] == reset[1]
    for name, (reference,) in one_state.items():
        parts = state[name]
        assert len(parts) == replicas, name
        for part in parts:
            assert part.shape == reference.shape, name
            np.testing.assert_allclose(part, reference, rtol=0, atol=ATOL)
            # Every replica applied the same update: identical copies.
            np.testing.assert_array_equal(part, parts[0])
    steps = 6 if kind == "unbounded" else BOUNDED_STEPS
    assert float(state["step"][0]) == steps  # one sparse update per step
    # The rows moved: the comparison is not between untouched tables.
    initial = table._initial_rows(0, table.capacity)
    assert np.abs(state["embeddings"][0] - initial).max() > 1e-2
    for a, b in zip(model.get_weights(), one[0].get_weights()):
        np.testing.assert_allclose(a, b, rtol=0, atol=ATOL)
    if kind == "unbounded" and replicas == 2:
        # Compiled predict under the strategy (traced again after the
        # growth) reads the grown table: one device's predictions, for
        # ids below and past the capacity (unseen: zero vectors).
        x = np.concatenate([_unbounded_data()[0][:6], [[63, 64, 99]] * 2])
        np.testing.assert_allclose(
            model.predict(x, batch_size=8, verbose=0),
            one[0].predict(x, batch_size=8, verbose=0),
            rtol=0,
            atol=ATOL,
        )
    if kind == "bounded" and replicas == device_count:
        # Saved under the strategy, loaded without it: every row, slot,
        # the step and the index's keys, as trained.
        path = str(tmp_path / "mirrored.keras")
        model.save(path)
        loaded = keras.saving.load_model(path).get_layer("table")
        variables = [loaded.embeddings, *loaded.trained_slots, loaded.step]
        for variable in variables:
            np.testing.assert_array_equal(
                keras.ops.convert_to_numpy(variable.value),
                state[variable.name][0],
            )
        assert list(loaded.key_index.keys()) == list(index.keys())
    if weights is None or (weights == 1).all():
        np.testing.assert_allclose(
            history["loss"], one_history["loss"], rtol=1e-5
        )


@pytest.mark.skipif(
    BACKEND == "tensorflow",
    reason="TensorFlow: the strategy is real, see the tests above",
)
def test_mirrored_scope_is_ignored_off_tensorflow(device_count):
    # JAX, torch: Keras' variables are not TensorFlow variables, so a
    # MirroredStrategy scope changes nothing: the bounded, growing table
    # trains bit for bit as without it (its multi-device training there:
    # keras.distribution on JAX, DDP on torch).
    one = _one_device("bounded")
    scoped = _train("bounded", device_count)
    assert scoped[3].log == one[3].log
    assert scoped[2].evictions == one[2].evictions == 37
    for name, (reference,) in one[4].items():
        (part,) = scoped[4][name]
        np.testing.assert_array_equal(part, reference)
    initial = one[1]._initial_rows(0, one[1].capacity)
    assert np.abs(one[4]["embeddings"][0] - initial).max() > 1e-2
