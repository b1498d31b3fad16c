"""`GradientFlowCheck(every_n_steps=N)` on a model with a growing
`GrowableEmbedding` table (TensorFlow reads the table with an unknown first
dimension, which Keras' `StatelessScope` refused), and reused after a layer
is frozen and the model recompiled (the new optimizer's step count restarts
at 0: the check must go on, not wait for the old count)."""

import keras
import numpy as np

from kmodels.callbacks import EmbeddingGrowth
from kmodels.callbacks import GradientFlowCheck
from kmodels.growable import GrowableEmbedding

N = 2  # checks every N steps; 4 steps (batch 4) an epoch


def table_model():
    keras.utils.set_random_seed(0)
    ids = keras.Input((2,), dtype="int32")
    table = GrowableEmbedding(4, initial_capacity=2, name="table")
    pooled = keras.layers.GlobalAveragePooling1D()(table(ids))
    hidden = keras.layers.Dense(3, name="hidden")(pooled)
    model = keras.Model(ids, keras.layers.Dense(1, name="head")(hidden))
    model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def data():
    # 8 distinct ids against an initial capacity of 2: the table grows
    # during the first epoch.
    x = np.array([[0, 1], [2, 3], [4, 5], [6, 7]] * 4, "int32")
    y = (np.arange(16, dtype="float32") / 16)[:, None]
    return x, y


def statuses(check, step):
    return {path: r.status for path, r in check.history[step].items()}


def test_periodic_check_follows_a_growing_table():
    model = table_model()
    x, y = data()
    check = GradientFlowCheck((x[:4], y[:4]), every_n_steps=N, patience=1)
    model.fit(
        x,
        y,
        batch_size=4,
        epochs=1,
        verbose=0,
        callbacks=[EmbeddingGrowth(), check],
    )
    table = model.get_layer("table")
    assert table.capacity >= 8
    # Before steps 0 and 2, and at the end of the epoch (step 4).
    assert sorted(check.history) == [0, 2, 4]
    ok = {
        "table/embeddings": "ok",
        "hidden/kernel": "ok",
        "hidden/bias": "ok",
        "head/kernel": "ok",
        "head/bias": "ok",
    }
    for step in (0, 2, 4):
        assert statuses(check, step) == ok
    assert check.flags == []
    # The last check saw the grown table: one gradient row per row.
    assert check.monitor.gradients["table/embeddings"].shape == (
        table.capacity,
        4,
    )


def test_reused_check_goes_on_after_freezing_and_recompiling():
    model = table_model()
    x, y = data()
    check = GradientFlowCheck((x[:4], y[:4]), every_n_steps=N, patience=1)
    fit = dict(batch_size=4, epochs=1, verbose=0)
    model.fit(x, y, callbacks=[EmbeddingGrowth(), check], **fit)
    assert sorted(check.history) == [0, 2, 4]
    model.get_layer("hidden").trainable = False
    model.compile(keras.optimizers.SGD(0.01), "mse")
    model.fit(x, y, callbacks=[EmbeddingGrowth(), check], **fit)
    # Numbered after the first run's checks, from the next multiple of N.
    assert sorted(check.history) == [0, 2, 4, 6, 8, 10]
    expected = {
        "table/embeddings": "ok",
        "hidden/kernel": "frozen",
        "hidden/bias": "frozen",
        "head/kernel": "ok",
        "head/bias": "ok",
    }
    for step in (6, 8, 10):
        assert statuses(check, step) == expected
    # A frozen layer is no missing gradient: nothing flagged.
    assert check.flags == []
