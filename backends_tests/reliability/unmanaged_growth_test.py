"""A GrowableEmbedding trained by `fit` without `EmbeddingGrowth`: inside a
compiled step (TensorFlow, JAX) ids past the capacity are unseen (zero
vectors, no row moves) instead of being clipped into the last row; torch's
eager `fit` grows the table (issue #16, "fit without EmbeddingGrowth")."""

import warnings

import keras
import numpy as np

from kmodels.layers import GrowableEmbedding
from kmodels.testing import oracle

BACKEND = keras.backend.backend()
# torch's `fit` is eager: concrete ids, and eager training calls grow.
COMPILED = BACKEND in ("tensorflow", "jax")
LR = 0.1
# float32 Adam against float64 NumPy: an Adam step moves a row by about LR
# (0.1), computed with float32 relative rounding ~1e-5: 2e-6 absolute.
ATOL = 2e-6
WARNING = (
    "GrowableEmbedding 'table' is training inside a compiled step without "
    "kmodels.callbacks.EmbeddingGrowth: the table cannot grow there, so ids at "
    "or past its capacity (8) are treated as unseen: they get zero vectors "
    "and train no row (ids are not checked either). Pass callbacks=["
    "kmodels.callbacks.EmbeddingGrowth()] to fit to grow the table for them."
)


def _model():
    ids = keras.Input(shape=(1,), dtype="int32")
    table = GrowableEmbedding(
        4,
        initial_capacity=8,
        optimizer=("adam", {"learning_rate": LR}),
        seed=5,
        name="table",
    )
    # The sum of the looked-up row: d(loss)/d(row) is the same in every
    # column, easy to write in NumPy.
    outputs = keras.ops.sum(table(ids), axis=(1, 2))
    model = keras.Model(ids, outputs)
    model.compile(optimizer="sgd", loss="mse")
    return model, table


def _numpy(variable):
    return np.array(keras.ops.convert_to_numpy(variable.value), "float64")


def _state(table):
    return [_numpy(table.embeddings), *map(_numpy, table.slot_variables)]


def _oracle_step(table_state, step, ids, y):
    """One sparse Adam step of `_model` on the batch `ids` (`-1`: an id
    that contributes a zero vector and no gradient), in NumPy."""
    table, m, v = table_state
    seen = ids >= 0
    sums = np.where(seen, table[np.where(seen, ids, 0)].sum(1), 0.0)
    # MSE over the batch: d/d(sum) = 2 (sum - y) / n, in every column.
    d = 2.0 * (sums - y) / len(ids)
    grads = np.repeat(d[:, None], table.shape[1], axis=1)
    new, (m, v) = oracle.sparse_optimizer_step(
        table,
        (m, v),
        step,
        ids[seen],
        grads[seen],
        kind="adam",
        learning_rate=LR,
    )
    return [new, m, v]


def test_fit_without_growth_follows_the_documented_rule():
    model, table = _model()
    y = np.array([0.5, -0.5], "float32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # Rows 0 and 1 train: non-zero Adam moments.
        model.fit(np.array([[0], [1]]), y, batch_size=2, verbose=0)
        after_first = _state(table)
        step = float(keras.ops.convert_to_numpy(table.step.value))
        # Id 9 is past the capacity (8); row 3 trains.
        model.fit(np.array([[3], [9]]), y, batch_size=2, verbose=0)
    ours = [
        str(w.message) for w in caught if "GrowableEmbedding" in str(w.message)
    ]
    after = _state(table)
    if COMPILED:
        assert ours == [WARNING]
        assert table.capacity == 8 and table.growths == 0
        expected = _oracle_step(after_first, step, np.array([3, -1]), y)
        # Every row but row 3 is bit-identical: the last row (7) did not
        # train on id 9, row 0 (where id 9 is parked) kept its values and
        # moments.
        for name, a, b in zip(("table", "m", "v"), after, after_first):
            keep = np.arange(8) != 3
            assert a[keep].tobytes() == b[keep].tobytes(), name
        for a, e in zip(after, expected):
            np.testing.assert_allclose(a[3], e[3], rtol=1e-5, atol=ATOL)
        # The docstring's rule at inference: id 9 is unseen (zeros).
        out = model.predict(np.array([[9], [3]]), verbose=0)
        assert out[0] == 0.0
        np.testing.assert_allclose(out[1], after[0][3].sum(), rtol=1e-6)
    else:
        # torch: eager fit grows (geometric: 8 -> 16) and id 9 trains.
        assert ours == []
        assert table.capacity == 16 and table.growths == 1
        grown = [np.concatenate([s, np.zeros((8, 4))]) for s in after_first]
        # The new rows start from the row initializer (zero moments).
        grown[0][8:] = table._initial_rows(8, 16)
        expected = _oracle_step(grown, step, np.array([3, 9]), y)
        for a, e in zip(after, expected):
            np.testing.assert_allclose(a, e, rtol=1e-5, atol=ATOL)
        assert np.abs(after[0][9] - grown[0][9]).min() > 1e-3


def test_ids_within_capacity_train_as_before():
    """No id past the capacity: the step matches NumPy Adam on every
    backend, with or without a compiled step."""
    model, table = _model()
    y = np.array([0.5, -0.5, 1.0], "float32")
    before = _state(table)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.fit(np.array([[2], [7], [2]]), y, batch_size=3, verbose=0)
    expected = _oracle_step(before, 0.0, np.array([2, 7, 2]), y)
    for a, e in zip(_state(table), expected):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=ATOL)
    assert table.capacity == 8
