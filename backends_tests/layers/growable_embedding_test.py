"""GrowableEmbedding on every backend: growth inside fit is invisible, the
sparse optimizer matches the oracle, inference never grows, errors are the
same everywhere, and saving keeps every row."""

import contextlib
import math

import keras
import numpy as np
import pytest

from kmodels.backend import growth as growth_backend
from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.testing import oracle
from kmodels.testing.layer_contract import run_layer_test

# float32 training on identical batches: the grown and pre-sized tables run
# the same float32 ops on the same rows, 1e-6 leaves room for op ordering.
INVISIBLE_ATOL = 1e-6


def _model(embedding, pool=True):
    ids = keras.Input(shape=(None,), dtype="int32")
    h = embedding(ids)
    out = keras.ops.sum(h**2, axis=-1)
    if pool:
        out = keras.ops.mean(out, axis=-1, keepdims=True)
    return keras.Model(ids, out)


def _table(layer):
    return keras.ops.convert_to_numpy(layer.embeddings.value)


@contextlib.contextmanager
def _train_step_compilations():
    """`[n]`: on JAX, the XLA compilations of Keras' train step inside the
    scope (`jax.monitoring`); `[]` elsewhere."""
    found = []
    if keras.backend.backend() != "jax":
        yield found
        return
    import jax

    count = [0]

    def listen(event, seconds, fun_name="", **kwargs):
        if event.endswith("backend_compile_duration") and "train_step" in str(
            fun_name
        ):
            count[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield found
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)
        found.append(count[0])


def _stream():
    # Ids arrive over time: 4 batches reaching ids 3, 9, 17, 30.
    rng = np.random.default_rng(7)
    highs = [4, 10, 18, 31]
    x = np.concatenate([rng.integers(0, h, (2, 5)) for h in highs]).astype(
        "int32"
    )
    x[1::2, 0] = np.array(highs) - 1
    return x, rng.normal(size=(len(x), 1)).astype("float32")


def test_layer_contract():
    # The table and its optimizer slots are trainable (updated through
    # `overwrite_with_gradient`) on JAX, non-trainable variables that the
    # layer's sparse optimizer writes on TensorFlow and torch; the step
    # counter is trainable everywhere. Four such variables: the table, the
    # two Adam slots and `trained_at` (the rows' last step, delta export).
    table = 4 if growth_backend.table_is_trainable() else 0
    ids = np.array([[1, 2, 0, 5, 7], [6, 0, 0, 0, 0]], "int32")
    run_layer_test(
        GrowableEmbedding,
        dict(
            output_dim=4,
            initial_capacity=3,
            max_capacity=50,
            seed=3,
            mask_zero=True,
            unseen="oov",
            oov_id=1,
            key_index=KeyIndex(),
        ),
        input_data=ids,
        expected_output_shape=(2, 5, 4),
        expected_output_dtype="float32",
        expected_num_trainable_weights=1 + table,
        expected_num_non_trainable_weights=4 - table,
        supports_masking=True,
        expected_mask=ids != 0,
        # Ids up to 7 grow the capacity-3 table before the fit step; the
        # table, both Adam slots and `trained_at` must change (checked as
        # trainable or as declared non-trainable updates).
        fit_kwargs=dict(callbacks=[EmbeddingGrowth()]),
        updated_non_trainable_weights=(
            "embeddings",
            "momentum",
            "velocity",
            "trained_at",
        ),
        # Same rows, same gather: identical outputs after a .keras round
        # trip.
        tolerance=0,
    )


def test_summary_counts_every_parameter_once_split_by_backend():
    """`model.summary()` of a grown table: the same total on every backend,
    the oracle's; its trainable / non-trainable split is the one
    `docs/growable_embedding.md` documents."""
    dim, first, top = 3, 4, 20
    embedding = GrowableEmbedding(dim, initial_capacity=first, seed=1)
    ids = keras.Input(shape=(2,), dtype="int32")
    flat = keras.layers.Flatten()(embedding(ids))
    model = keras.Model(ids, keras.layers.Dense(1)(flat))
    model.compile(optimizer="adam", loss="mse")
    x = np.array([[1, 2], [3, top]], "int32")
    model.fit(x, np.zeros((2, 1)), verbose=0, callbacks=[EmbeddingGrowth()])
    lines = []
    model.summary(print_fn=lambda text, line_break=True: lines.append(text))
    counts = {}
    for line in "".join(lines).splitlines():
        label, _, rest = line.strip().partition(" params: ")
        if rest:
            counts[label] = int(rest.split()[0].replace(",", ""))

    # Oracle, from the shapes: growth doubles 4 rows until id 20 fits.
    rows = first
    while rows <= top:
        rows *= 2
    assert embedding.capacity == rows == 32
    table = rows * dim  # what the table's sparse optimizer trains
    state = 2 * rows * dim + rows + 1  # Adam's two slots, trained_at, step
    dense = 2 * dim + 1  # kernel (2 ids x dim, 1) and bias
    keras_adam = 2 + 2 * dense  # iterations, learning rate, 2 slots
    assert embedding.count_params() == table + state == 321
    assert counts["Total"] == table + state + dense + keras_adam == 344
    assert counts["Optimizer"] == keras_adam
    # The split follows the variables' `trainable` flags, which Keras'
    # trainers also use to pick what they hand to the model's optimizer.
    # JAX: the table, its slots, trained_at and the step are trainable
    # variables with `overwrite_with_gradient` (the updated values come
    # back as their gradients). TensorFlow, torch: only the step is; the
    # table, slots and trained_at are non-trainable variables written in
    # place by the sparse update. Flagging them trainable there would give
    # them to Keras' optimizer, which has no gradient for them (a
    # "Gradients do not exist" warning); the only gradient it could take is
    # the whole updated table, a dense copy per step. So kmodels cannot
    # change summary's split without changing what the optimizer receives.
    if keras.backend.backend() == "jax":
        split = (table + state + dense, 0)
    else:
        split = (1 + dense, table + state - 1)
    assert (counts["Trainable"], counts["Non-trainable"]) == split
    # The documented count of what trains, the same on every backend: the
    # weights Keras' optimizer updates (flags and gradients), plus each
    # table's rows.
    by_keras = sum(
        math.prod(v.shape)
        for v in model.trainable_weights
        if not v.overwrite_with_gradient
    )
    assert by_keras == dense
    assert math.prod(embedding.embeddings.shape) == table


def test_rows_do_not_depend_on_capacity():
    small = GrowableEmbedding(4, initial_capacity=2, seed=5)
    large = GrowableEmbedding(4, initial_capacity=16, seed=5)
    small.build()
    large.build()
    small.grow_to(16)
    np.testing.assert_array_equal(_table(small), _table(large))
    # "uniform" means U(-0.05, 0.05).
    assert np.abs(_table(large)).max() <= 0.05


@pytest.mark.usefixtures("no_first_reserve")
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_growth_is_invisible(optimizer):
    x, y = _stream()
    tables = []
    for capacity in (2, 32):
        layer = GrowableEmbedding(
            3,
            initial_capacity=capacity,
            optimizer=optimizer,
            seed=11,
        )
        model = _model(layer)
        model.compile(optimizer="sgd", loss="mse")
        growth = EmbeddingGrowth()
        with _train_step_compilations() as compiled:
            model.fit(
                x,
                y,
                batch_size=2,
                epochs=2,
                shuffle=False,
                verbose=0,
                callbacks=[growth],
            )
        tables.append(_table(layer))
        if capacity == 2:
            # 2 -> 4 -> 16 -> 32: three growths, one per batch that needs it.
            assert [e["to"] for e in growth.log] == [4, 16, 32]
            assert growth.growths <= math.ceil(math.log2(32 / 2))
            if keras.backend.backend() == "jax":
                # The step holds the table padded to 4x (growth_factor**2)
                # the capacity a growth reached: 4 -> 16 rows (16 fits),
                # 32 -> 128: two recompilations. XLA compiled the step
                # exactly that often (the first growth comes before the
                # first step, whose compilation it is).
                assert growth.log[0]["step"] == 0
                assert growth.recompilations == 2
                assert compiled == [growth.recompilations]
            else:
                # No compilation count to compare with here: TensorFlow
                # retraces inside tf.function, torch runs eagerly.
                assert growth.recompilations == 3
    grown, presized = tables
    assert grown.shape == presized.shape == (32, 3)
    np.testing.assert_allclose(grown, presized, atol=INVISIBLE_ATOL, rtol=0)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_sparse_update_matches_oracle(optimizer, parity):
    """Two steps with repeated ids; loss = mean(rows**2) so that
    dL/drow = 2 row / (ids * dim)."""
    layer = GrowableEmbedding(
        2,
        initial_capacity=6,
        optimizer=(optimizer, {"learning_rate": 0.1}),
        embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
        seed=2,
    )
    ids = keras.Input(shape=(3,), dtype="int32")
    model = keras.Model(ids, layer(ids))
    model.compile(optimizer="sgd", loss="mse")
    x = np.array([[1, 1, 4], [0, 4, 4]], "int32")
    table = _table(layer).astype(np.float64)
    slots = [np.zeros_like(table)] * 2 if optimizer == "adam" else []
    for step in range(2):
        grads = 2.0 * table[x] / x.size / 2
        table, slots = oracle.sparse_optimizer_step(
            table, slots, step, x, grads, kind=optimizer, learning_rate=0.1
        )
    model.fit(
        x,
        np.zeros((2, 3, 2)),
        batch_size=2,
        epochs=2,
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    # float32 against float64. SGD: 1e-6 on values of order 1. Adam: float32
    # `1 - beta_2**t` at t=2 is 0.001999 with a relative error near 3e-5
    # (cancellation, Keras' own Adam has it too), times steps of size
    # lr = 0.1: 1e-5.
    atol = 1e-6 if optimizer == "sgd" else 1e-5
    np.testing.assert_allclose(_table(layer), table, atol=atol, rtol=0)
    # Rows 2, 3 and 5 never appear: untouched (lazy, as the oracle).
    parity.record(
        f"growable_embedding/sparse_{optimizer}",
        _table(layer),
        atol=atol,
        rtol=0,
    )


def test_seed_scenario_trains_in_fit():
    """Seed 004: ids 0..7, capacity from 2, SGD, MSE towards zeros."""
    layer = GrowableEmbedding(
        3,
        initial_capacity=2,
        optimizer=("sgd", {"learning_rate": 0.05}),
        embeddings_initializer=keras.initializers.RandomUniform(-1.0, 1.0),
        seed=0,
    )
    model = _model(layer, pool=False)
    model.compile(optimizer="sgd", loss="mse")
    x = np.array([[0, 1, 2, 3], [4, 5, 6, 7]], "int32")
    growth = EmbeddingGrowth()
    history = model.fit(
        x,
        np.zeros((2, 4)),
        batch_size=2,
        epochs=5,
        verbose=0,
        callbacks=[growth],
    )
    losses = history.history["loss"]
    assert layer.capacity == 8
    assert growth.log == [
        {"step": 0, "layer": layer.name, "from": 2, "to": 8, "max_id": 7}
    ]
    assert all(b < a for a, b in zip(losses, losses[1:]))
    assert losses[-1] < 0.8 * losses[0]


def test_callbacks_see_the_logical_table_during_fit():
    # On JAX the train step holds the table padded past its capacity; a
    # callback (reading `self.model`, which writes the state back) and a
    # checkpoint taken mid-fit see the capacity, and so do the rows saved.
    layer = GrowableEmbedding(2, initial_capacity=2, optimizer="adam", seed=0)
    model = _model(layer)
    model.compile(optimizer="sgd", loss="mse")
    x = np.array([[1, 2], [3, 5], [6, 7], [1, 9]], "int32")
    seen = []

    class Probe(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            self.model  # writes the running state back (JAX)
            store = {}
            layer.save_own_variables(store)
            seen.append(
                (
                    layer.capacity,
                    tuple(layer.embeddings.shape),
                    _table(layer).shape,
                    store["embeddings"].shape,
                    *(tuple(v.shape) for v in layer.slot_variables),
                )
            )

    growth = EmbeddingGrowth()
    model.fit(
        x,
        np.zeros((4, 1)),
        batch_size=1,
        shuffle=False,
        verbose=0,
        callbacks=[growth, Probe()],
    )
    # 2 -> 4 (batch 0), -> 8 (batch 1), 8 holds 7, -> 16 (batch 3).
    assert [e["to"] for e in growth.log] == [4, 8, 16]
    rows = [4, 8, 8, 16]
    assert [s[0] for s in seen] == rows
    for (_, *shapes), n in zip(seen, rows):
        assert all(shape == (n, 2) for shape in shapes), shapes
    assert layer.capacity == 16 and _table(layer).shape == (16, 2)


@pytest.mark.usefixtures("no_first_reserve")
def test_large_growth_factors_reserve_at_most_four_times():
    # growth_factor=8: a growth passes any reserve of at most 4x the
    # capacity (JAX), so every growth recompiles, on every backend.
    layer = GrowableEmbedding(
        2, initial_capacity=2, growth_factor=8, optimizer="sgd", seed=0
    )
    model = _model(layer)
    model.compile(optimizer="sgd", loss="mse")
    x = np.array([[0, 1], [5, 9], [20, 100]], "int32")  # 2 -> 16 -> 128
    growth = EmbeddingGrowth()
    with _train_step_compilations() as compiled:
        model.fit(
            x,
            np.zeros((3, 1)),
            batch_size=1,
            shuffle=False,
            verbose=0,
            callbacks=[growth],
        )
    assert [e["to"] for e in growth.log] == [16, 128]
    assert growth.recompilations == growth.growths == 2
    if keras.backend.backend() == "jax":
        # The first step, then one per growth.
        assert compiled == [1 + growth.recompilations]


def test_refused_batch_after_a_padded_step_loses_nothing(tmp_path):
    # Batch 0 grows the table 2 -> 4 rows (on JAX the step then holds it
    # padded to 16); batch 1 holds an id past max_capacity and is refused.
    # The table, its slots and a checkpoint written after batch 0 are those
    # of a fit that stopped after batch 0 (an independent run), at the
    # logical capacity; training goes on from there as that run's does.
    path = str(tmp_path / "after_batch_0.weights.h5")

    def make():
        layer = GrowableEmbedding(
            2, initial_capacity=2, max_capacity=32, optimizer="adam", seed=6
        )
        model = _model(layer)
        model.compile(optimizer="sgd", loss="mse")
        return model, layer

    def state(layer):
        return [_table(layer)] + [
            keras.ops.convert_to_numpy(v.value) for v in layer.slot_variables
        ]

    model, layer = make()
    checkpoint = keras.callbacks.ModelCheckpoint(
        path, save_weights_only=True, save_freq=1
    )
    with pytest.raises(ValueError, match="reached max_capacity=32: got id 40"):
        model.fit(
            np.array([[1, 3], [2, 40]], "int32"),
            np.ones((2, 1)),
            batch_size=1,
            shuffle=False,
            verbose=0,
            callbacks=[EmbeddingGrowth(), checkpoint],
        )
    reference, reference_layer = make()
    reference.fit(
        np.array([[1, 3]], "int32"),
        np.ones((1, 1)),
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    assert layer.capacity == reference_layer.capacity == 4
    for got, want in zip(state(layer), state(reference_layer)):
        assert got.shape == want.shape == (4, 2)
        np.testing.assert_allclose(got, want, atol=INVISIBLE_ATOL, rtol=0)
    restored, restored_layer = make()
    restored.load_weights(path)
    assert restored_layer.capacity == 4
    for got, want in zip(state(restored_layer), state(reference_layer)):
        np.testing.assert_allclose(got, want, atol=INVISIBLE_ATOL, rtol=0)
    # Training goes on: ids up to 5 grow both tables to 8.
    for m in (model, reference):
        m.fit(
            np.array([[0, 5]], "int32"),
            np.ones((1, 1)),
            verbose=0,
            callbacks=[EmbeddingGrowth()],
        )
    assert layer.capacity == reference_layer.capacity == 8
    for got, want in zip(state(layer), state(reference_layer)):
        np.testing.assert_allclose(got, want, atol=INVISIBLE_ATOL, rtol=0)


@pytest.mark.usefixtures("no_first_reserve")
def test_growth_count_is_logarithmic():
    layer = GrowableEmbedding(2, initial_capacity=2, optimizer="sgd", seed=0)
    model = _model(layer)
    model.compile(optimizer="sgd", loss="mse")
    # Each batch needs one more doubling: 2 -> 4 -> 8 -> 16 -> 32 -> 64.
    x = np.array([[1, 2], [3, 5], [6, 9], [10, 17], [18, 33]], "int32")
    growth = EmbeddingGrowth()
    model.fit(
        x,
        np.zeros((5, 1)),
        batch_size=1,
        shuffle=False,
        verbose=0,
        callbacks=[growth],
    )
    assert layer.capacity == 64
    bound = math.ceil(math.log2(64 / 2))
    assert growth.growths == bound == 5
    if keras.backend.backend() == "jax":
        # The step holds the table padded to 4x (growth_factor**2) the
        # capacity a growth reached: 4 -> 16 rows (8 and 16 fit), 32 -> 128
        # (64 fits).
        assert growth.recompilations == 2
    else:
        assert growth.recompilations == growth.growths
    # Seen again, the same ids cause no growth.
    model.fit(x, np.zeros((5, 1)), batch_size=1, verbose=0, callbacks=[growth])
    assert growth.growths == 5


def test_inference_never_grows_and_unseen_ids():
    x = np.array([[0, 3, 9]], "int32")
    for unseen in ("zeros", "oov"):
        layer = GrowableEmbedding(
            2, initial_capacity=4, unseen=unseen, oov_id=1, seed=0
        )
        model = _model(layer, pool=False)
        table = _table(layer)
        out = keras.ops.convert_to_numpy(layer(x))
        model.predict(x, verbose=0)
        model.compile(optimizer="sgd", loss="mse")
        model.evaluate(x, np.zeros((1, 3)), verbose=0)
        assert layer.capacity == 4
        expected_unseen = np.zeros(2) if unseen == "zeros" else table[1]
        np.testing.assert_array_equal(out[0, 2], expected_unseen)
        np.testing.assert_array_equal(out[0, 1], table[3])
    layer = GrowableEmbedding(2, initial_capacity=4, unseen="error", seed=0)
    with pytest.raises(ValueError, match='unseen id 9 .*unseen="error"'):
        layer(x)


def test_bad_ids_raise_the_same_errors():
    layer = GrowableEmbedding(2, initial_capacity=4, max_capacity=8, seed=0)
    with pytest.raises(ValueError, match="expects ids >= 0; got -1"):
        layer(np.array([[1, -1]], "int32"))
    with pytest.raises(TypeError, match="expects integer ids; got dtype"):
        layer(np.array([[1.0, 2.0]], "float32"))
    model = _model(layer)
    model.compile(optimizer="sgd", loss="mse")
    for bad, error, message in [
        ([[1, -1]], ValueError, "expects ids >= 0; got -1"),
        ([[1, 8]], ValueError, "reached max_capacity=8: got id 8"),
    ]:
        with pytest.raises(error, match=message):
            model.fit(
                np.array(bad, "int32"),
                np.zeros((1, 1)),
                verbose=0,
                callbacks=[EmbeddingGrowth()],
            )
    assert layer.capacity == 4
    with pytest.raises(ValueError, match="reached max_capacity=8: got id 9"):
        layer(np.array([[9]], "int32"), training=True)


def test_eager_call_grows_and_compiled_functions_follow():
    layer = GrowableEmbedding(2, initial_capacity=2, seed=0)
    ids = keras.Input(shape=(None,), dtype="int32")
    model = keras.Model(ids, layer(ids))
    x = np.array([[1, 5]], "int32")
    before = model.predict(x, verbose=0)
    np.testing.assert_array_equal(before[0, 1], [0.0, 0.0])  # unseen
    out = layer(np.array([[5]], "int32"), training=True)
    assert layer.capacity == 8
    table = _table(layer)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(out)[0, 0], table[5]
    )
    # The predict function compiled before the growth reads the new rows
    # (TensorFlow: the table is a resizable tf.Variable).
    after = model.predict(x, verbose=0)
    np.testing.assert_array_equal(after[0], table[[1, 5]])


def test_save_load_resumes_and_grows(tmp_path):
    index = KeyIndex("string")
    layer = GrowableEmbedding(3, initial_capacity=2, seed=4, key_index=index)
    model = _model(layer)
    model.compile(optimizer="adam", loss="mse")
    keys = np.array([["a", "b"], ["c", "d"]])
    x = index.lookup(keys).astype("int32")
    model.fit(
        x,
        np.ones((2, 1)),
        epochs=2,
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    path = str(tmp_path / "growable.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    table = next(x for x in loaded.layers if isinstance(x, GrowableEmbedding))
    assert table.capacity == layer.capacity == 8
    np.testing.assert_array_equal(_table(table), _table(layer))
    assert table.key_index.keys() == ["a", "b", "c", "d"]
    for a, b in zip(layer.slot_variables, table.slot_variables):
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(a.value),
            keras.ops.convert_to_numpy(b.value),
        )
    x_new = table.key_index.lookup([["e", "f"], ["g", "h"], ["i", "a"]])
    growth = EmbeddingGrowth()
    loaded.fit(
        x_new.astype("int32"),
        np.ones((3, 1)),
        verbose=0,
        callbacks=[growth],
    )
    assert table.capacity == 16 and growth.growths == 1


def test_model_checkpoint_restores_exactly(tmp_path):
    x, y = _stream()
    path = str(tmp_path / "ckpt.weights.h5")

    def make():
        layer = GrowableEmbedding(3, initial_capacity=2, seed=9)
        model = _model(layer)
        model.compile(optimizer="adam", loss="mse")
        return model, layer

    model, layer = make()
    checkpoint = keras.callbacks.ModelCheckpoint(
        path, save_weights_only=True, save_freq=2
    )
    # Checkpoint after 2 of 4 batches (capacity 16 then), then train on.
    model.fit(
        x[:4],
        y[:4],
        batch_size=2,
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth(), checkpoint],
    )
    saved = _table(layer)
    model.fit(
        x[4:],
        y[4:],
        batch_size=2,
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    restored, restored_layer = make()
    restored.load_weights(path)
    assert restored_layer.capacity == 16
    np.testing.assert_array_equal(_table(restored_layer), saved)
    # Resuming from the checkpoint redoes the rest exactly.
    restored.fit(
        x[4:],
        y[4:],
        batch_size=2,
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    np.testing.assert_allclose(
        _table(restored_layer), _table(layer), atol=0, rtol=0
    )


def test_mask_zero():
    layer = GrowableEmbedding(2, initial_capacity=4, mask_zero=True, seed=0)
    x = np.array([[3, 1, 0, 0]], "int32")
    mask = keras.ops.convert_to_numpy(layer.compute_mask(x))
    np.testing.assert_array_equal(mask, [[True, True, False, False]])
    ids = keras.Input(shape=(None,), dtype="int32")
    pooled = keras.layers.GlobalAveragePooling1D()(layer(ids))
    model = keras.Model(ids, pooled)
    out = keras.ops.convert_to_numpy(model(x))
    table = _table(layer)
    # Masked mean over the 2 real tokens only.
    np.testing.assert_allclose(
        out[0], (table[3] + table[1]) / 2, atol=1e-7, rtol=0
    )


def test_inside_transformer_encoder_with_growing_vocabulary():
    import keras_hub

    layer = GrowableEmbedding(8, initial_capacity=4, mask_zero=True, seed=0)
    ids = keras.Input(shape=(6,), dtype="int32")
    h = keras_hub.layers.TransformerEncoder(8, 2, dropout=0.0)(layer(ids))
    out = keras.layers.Dense(1)(keras.ops.mean(h, axis=1))
    model = keras.Model(ids, out)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    rng = np.random.default_rng(0)
    x = rng.integers(1, 30, (8, 6)).astype("int32")
    x[:, -1] = 0  # padding
    y = (x.sum(axis=1, keepdims=True) / 50.0).astype("float32")
    growth = EmbeddingGrowth()
    # One batch: the vocabulary grows before the first step (one compile).
    history = model.fit(
        x, y, batch_size=8, epochs=6, verbose=0, callbacks=[growth]
    )
    assert layer.capacity == 32 and growth.growths == 1
    losses = history.history["loss"]
    assert losses[-1] < losses[0]
