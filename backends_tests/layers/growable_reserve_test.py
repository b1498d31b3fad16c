"""GrowableEmbedding's reserve on every backend: a growth within it inside
`fit` traces nothing again, draws no row and, on JAX, writes no trainer
state back (a value update), on torch copies nothing; the rows, slots and
`trained_at` equal a pre-sized table's after it."""

import keras
import numpy as np
import pytest

from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding

# float32 training on identical batches (as growable_embedding_test).
INVISIBLE_ATOL = 1e-6

# One batch per step. Capacity 4: batch 0 fits; batch 1 grows to 8, past
# any reserve (JAX then holds 4x: 32 rows); batches 2 and 3 grow to 16 and
# 32, within it; batch 4 grows to 64, past it.
IDS = np.array([[0, 1], [4, 5], [9, 15], [20, 31], [40, 2]], "int32")
WITHIN = (2, 3)


def _counting_model(table, counts):
    """ids -> table -> mean of squares, in a `keras.Model` subclass that
    counts its `train_step` calls (on TensorFlow and JAX: traces) and its
    `jax_state_sync` calls (JAX: the trainer's state written back into
    the variables)."""

    class Counting(keras.Model):
        def train_step(self, *args, **kwargs):
            counts["traces"] += 1
            return super().train_step(*args, **kwargs)

        def jax_state_sync(self):
            counts["syncs"] += 1
            return super().jax_state_sync()

    ids = keras.Input(shape=(None,), dtype="int32")
    out = keras.ops.mean(keras.ops.sum(table(ids) ** 2, -1), -1, True)
    model = Counting(ids, out)
    model.compile(optimizer="sgd", loss="mse")
    return model


class _PerBatch(keras.callbacks.Callback):
    """`counts` after each batch (never reads `self.model`: on JAX that
    writes the state back)."""

    def __init__(self, counts):
        super().__init__()
        self.counts = counts
        self.after = []

    def on_train_batch_end(self, batch, logs=None):
        self.after.append(dict(self.counts))


def _trained(capacity):
    table = GrowableEmbedding(
        2, initial_capacity=capacity, optimizer="adam", seed=3
    )
    counts = {"traces": 0, "syncs": 0}
    model = _counting_model(table, counts)
    growth = EmbeddingGrowth()
    per_batch = _PerBatch(counts)
    model.fit(
        IDS,
        np.ones((len(IDS), 1), "float32"),
        batch_size=1,
        shuffle=False,
        verbose=0,
        callbacks=[growth, per_batch],
    )
    return table, model, growth, per_batch.after


def _state(table):
    return [
        keras.ops.convert_to_numpy(v.value)
        for v in (table.embeddings, *table.trained_slots, table.trained_at)
    ]


@pytest.mark.usefixtures("no_first_reserve")
def test_growth_within_the_reserve_is_a_value_update():
    table, model, growth, after = _trained(4)
    assert [e["to"] for e in growth.log] == [8, 16, 32, 64]
    backend = keras.backend.backend()
    if backend == "torch":
        # Eager: every step runs `train_step`, nothing is compiled.
        assert model.jit_compile is False
        assert [a["traces"] for a in after] == [1, 2, 3, 4, 5]
    else:
        # The growths within the reserve (batches 2 and 3) trace nothing.
        traces = [a["traces"] for a in after]
        assert traces[WITHIN[0]] == traces[WITHIN[-1]] == traces[1]
    if backend == "jax":
        # Past the reserve: a recompilation each (batches 1 and 4).
        assert growth.recompilations == 2
        # Within it, the trainer's state is not written back: the step
        # already holds the rows, with the values fresh rows start from.
        syncs = [a["syncs"] for a in after]
        assert syncs[WITHIN[0]] == syncs[WITHIN[-1]] == syncs[1]
        assert syncs[4] > syncs[3]
    # Nothing lost: the table, its Adam slots and `trained_at` equal a
    # table pre-sized to 64 rows trained on the same batches.
    presized, _, no_growth, _ = _trained(64)
    assert no_growth.growths == 0 and table.capacity == presized.capacity
    for grown, expected in zip(_state(table), _state(presized)):
        assert grown.shape == expected.shape
        np.testing.assert_allclose(grown, expected, atol=INVISIBLE_ATOL, rtol=0)
    # The rows the batches trained, and only those, carry a step.
    trained = np.flatnonzero(_state(table)[-1][:, 0])
    np.testing.assert_array_equal(trained, np.unique(IDS))


@pytest.mark.usefixtures("no_first_reserve")
def test_fresh_rows_are_drawn_once_per_reserve():
    # Every backend draws the values of new rows once per reserve, up to
    # its end, and never for a growth within it: 8 sets a reserve of 32
    # rows (4x), 16 and 32 fit, 64 sets the next (16x: 1024).
    table = GrowableEmbedding(2, initial_capacity=4, optimizer="adam", seed=3)
    drawn = []
    fresh_rows = table.fresh_rows

    def spy(variable, start, stop):
        if variable is table.embeddings:
            drawn.append(stop)
        return fresh_rows(variable, start, stop)

    table.fresh_rows = spy
    model = _counting_model(table, {"traces": 0, "syncs": 0})
    model.fit(
        IDS,
        np.ones((len(IDS), 1), "float32"),
        batch_size=1,
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )
    assert table.capacity == 64
    assert drawn == [32, 1024]


def test_torch_growth_within_the_reserve_copies_nothing():
    # torch: the table, its slots and `trained_at` view the first rows of
    # one buffer per reserve; a growth within it is a longer view (the
    # same memory), and the variables read exactly the logical rows.
    if keras.backend.backend() != "torch":
        pytest.skip("torch's buffers (JAX: test above; TensorFlow copies)")
    table = GrowableEmbedding(2, initial_capacity=4, optimizer="adam", seed=3)
    model = _counting_model(table, {"traces": 0, "syncs": 0})
    pointers = []

    class Pointers(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pointers.append(
                [v.value.data_ptr() for v in table.updated_slots]
                + [table.embeddings.value.data_ptr(), table.capacity]
            )

    model.fit(
        IDS,
        np.ones((len(IDS), 1), "float32"),
        batch_size=1,
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth(), Pointers()],
    )
    # Batches 1-3: 8, 16, 32 rows in the buffer of 32; batch 4: 64 rows.
    assert [p[-1] for p in pointers] == [4, 8, 16, 32, 64]
    assert pointers[1][:-1] == pointers[2][:-1] == pointers[3][:-1]
    assert all(a != b for a, b in zip(pointers[3][:-1], pointers[4][:-1]))
    store = {}
    table.save_own_variables(store)
    assert store["embeddings"].shape == (64, 2)
    assert {w.shape[0] for w in table.get_weights() if w.ndim} == {64}


def test_a_small_table_grows_into_its_first_reserve_compiling_once():
    # Default settings: on JAX a table under `EmbeddingGrowth` holds a
    # first reserve before it grows (`reserve.first_reserve`: up to
    # FIRST_RESERVE_ROWS within FIRST_RESERVE_BYTES), so the four growths
    # of IDS (4 -> 64 rows) trace and compile the step once. TensorFlow
    # and torch keep no first reserve: each growth counts as a
    # recompilation there (their reserves, past the first growth, are
    # tested above).
    from kmodels.backend.common import reserve

    table, model, growth, after = _trained(4)
    assert [e["to"] for e in growth.log] == [8, 16, 32, 64]
    backend = keras.backend.backend()
    if backend == "jax":
        assert reserve.first_reserve(table, 4) == min(
            reserve.FIRST_RESERVE_ROWS, reserve.FIRST_RESERVE_BYTES // (2 * 4)
        )
        assert growth.recompilations == 0
        assert [a["traces"] for a in after] == [1] * len(IDS)
        # No growth writes the trainer's state back.
        assert len({a["syncs"] for a in after}) == 1
    else:
        assert growth.recompilations == growth.growths == 4
    # Nothing lost: as a table pre-sized to 64 rows.
    presized, _, _, _ = _trained(64)
    for grown, expected in zip(_state(table), _state(presized)):
        assert grown.shape == expected.shape
        np.testing.assert_allclose(grown, expected, atol=INVISIBLE_ATOL, rtol=0)
    # After `fit` the variables hold the capacity's rows only.
    assert keras.ops.shape(table.embeddings.value)[0] == table.capacity == 64
