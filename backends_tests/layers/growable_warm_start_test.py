"""Warm start: `GrowableEmbedding.assign(keys, vectors)` loads pretrained
vectors for given keys, before or between training steps.

Checked against a NumPy oracle: the rows hold the vectors, their Adam
slots restart at zero, other rows and slots are untouched; the next `fit`
step moves the warm rows exactly as one sparse Adam step of the oracle
(`kmodels.testing.oracle.sparse_optimizer_step`) from the vectors; a full
LRU index evicts by its policy for the new keys (and `EmbeddingGrowth`
does not restart the warm rows); an index without eviction refuses the
batch; a `.keras` round trip keeps the rows and their keys; the warm rows
are in the next delta.
"""

import keras
import numpy as np
import pytest

from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.testing import oracle
from kmodels.testing.row_sum import row_sum_model

LR = 0.1


def _table(index, capacity=4, optimizer=("adam", {"learning_rate": LR})):
    return GrowableEmbedding(
        3,
        initial_capacity=capacity,
        optimizer=optimizer,
        seed=5,
        key_index=index,
        name="users",
    )


def _numpy(variable):
    return np.array(keras.ops.convert_to_numpy(variable.value))


def _slots(table):
    return {v.name: _numpy(v) for v in table.trained_slots}


def _fit(model, rows, y):
    model.fit(
        rows.reshape(-1, 1).astype("int32"),
        np.asarray(y, "float32"),
        batch_size=len(rows),
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth()],
    )


def test_warm_start_writes_rows_with_fresh_slots_and_trains_on():
    index = KeyIndex("string")
    table = _table(index)
    model, _ = row_sum_model(table)
    # Train "a" and "b" first, so that their slots are not zero.
    _fit(model, index.lookup(["a", "b"]), [1.0, -1.0])
    before, slots_before = _numpy(table.embeddings), _slots(table)
    assert np.abs(slots_before["momentum"][[1, 2]]).min() > 0
    vectors = np.arange(12, dtype="float32").reshape(4, 3) / 10
    rows = table.assign(["b", "c", "d", "e"], vectors)
    # "b" keeps its row; new keys take the next rows, the table grows.
    np.testing.assert_array_equal(rows, [2, 3, 4, 5])
    assert table.capacity == 8 and index.keys() == ["a", "b", "c", "d", "e"]
    after, slots_after = _numpy(table.embeddings), _slots(table)
    np.testing.assert_array_equal(after[rows], vectors)
    np.testing.assert_array_equal(after[[0, 1]], before[[0, 1]])
    for name, value in slots_after.items():
        np.testing.assert_array_equal(value[rows], 0.0)
        np.testing.assert_array_equal(value[1], slots_before[name][1])
    # One fit step on "b" and "a": the oracle's Adam step from there.
    step = int(_numpy(table.step))
    ids = index.lookup(["b", "a"])
    expected, expected_slots = oracle.sparse_optimizer_step(
        after.astype("float64"),
        [slots_after["momentum"], slots_after["velocity"]],
        step,
        ids,
        # MSE of sum(row) against y over 2 examples: 2 (sum - y) / 2.
        np.repeat((after[ids].sum(-1) - np.array([0.5, 0.0]))[:, None], 3, 1),
        kind="adam",
        learning_rate=LR,
    )
    _fit(model, ids, [0.5, 0.0])
    np.testing.assert_allclose(_numpy(table.embeddings), expected, atol=1e-6)
    for name, value in zip(("momentum", "velocity"), expected_slots):
        np.testing.assert_allclose(_slots(table)[name], value, atol=1e-6)


def test_warm_start_on_a_full_lru_index_evicts_by_its_policy():
    index = KeyIndex("int64", max_capacity=4, eviction="lru")
    table = _table(index, optimizer=("sgd", {"learning_rate": LR}))
    model, _ = row_sum_model(table)
    _fit(model, index.lookup([10, 20, 30]), [0.0, 0.0, 0.0])
    _fit(model, index.lookup([30, 10]), [0.0, 0.0])  # 20: least recent
    vectors = np.full((1, 3), 2.0, "float32")
    rows = table.assign([40], vectors)
    np.testing.assert_array_equal(rows, [2])  # 20's row
    assert sorted(index.keys()) == [10, 30, 40] and index.evictions == 1
    # The row is not restarted before the next step: it trains from the
    # vector (SGD on MSE of sum(row) against 0: row -= LR * sum(row)).
    _fit(model, index.lookup([40]), [0.0])
    np.testing.assert_allclose(
        _numpy(table.embeddings)[2], 2.0 - LR * 2 * 6.0, atol=1e-6
    )
    # Without eviction a full index refuses the batch; nothing changes.
    full = KeyIndex("int64", max_capacity=3)
    table = _table(full, capacity=3)
    table.assign([1, 2], np.ones((2, 3)))
    with pytest.raises(ValueError, match="is full: max_capacity=3"):
        table.assign([3, 4], np.ones((2, 3)))
    assert full.keys() == [1, 2]


def test_warm_start_refuses_bad_input_with_clear_errors():
    table = _table(KeyIndex("string"))
    table.build()
    cases = [
        (["a", "b"], np.ones((3, 3)), ValueError, r"shape \(keys=2, output"),
        (["a"], np.ones((1, 2)), ValueError, r"output_dim=3\); got \(1, 2\)"),
        (["a"], np.array([["x", "y", "z"]]), TypeError, "float vectors"),
        (["a", "a"], np.ones((2, 3)), ValueError, "'a' appears more than"),
        ("a", np.ones((1, 3)), TypeError, "got the scalar 'a'"),
        (["a"], np.full((1, 3), np.nan), ValueError, "NaN or infinite"),
    ]
    for keys, vectors, error, match in cases:
        with pytest.raises(error, match=match):
            table.assign(keys, vectors)
    assert table.key_index.keys() == []
    frozen = KeyIndex("string", frozen=True)
    with pytest.raises(ValueError, match="is frozen"):
        _table(frozen).assign(["a"], np.ones((1, 3)))
    waiting = KeyIndex("string", min_count=2)
    with pytest.raises(ValueError, match="min_count=2"):
        _table(waiting).assign(["a"], np.ones((1, 3)))
    follows = _table(KeyIndex("string"), optimizer=None)
    with pytest.raises(ValueError, match="optimizer=None"):
        follows.assign(["a"], np.ones((1, 3)))
    # Without an index the keys are ids, checked as ids.
    plain = _table(None)
    with pytest.raises(ValueError, match="expects ids >= 0; got -1"):
        plain.assign([-1], np.ones((1, 3)))


def test_warm_start_rows_survive_save_load_and_join_the_next_delta(tmp_path):
    index = KeyIndex("string")
    table = _table(index)
    model, _ = row_sum_model(table)
    _fit(model, index.lookup(["a"]), [1.0])
    mark = table.mark()
    vectors = np.linspace(-1, 1, 6, dtype="float32").reshape(2, 3)
    rows = table.assign(["z", "a"], vectors)
    change = table.delta(since=mark)
    np.testing.assert_array_equal(change.rows, [1, 2])
    assert change.keys_added == ["z"] and list(change.key_rows) == [2]
    np.testing.assert_array_equal(change.values, vectors[[1, 0]])
    path = str(tmp_path / "warm.keras")
    model.save(path)
    loaded = keras.saving.load_model(path).get_layer("users")
    assert loaded.key_index.keys() == ["a", "z"]
    np.testing.assert_array_equal(_numpy(loaded.embeddings)[rows], vectors)
    np.testing.assert_array_equal(
        _slots(loaded)["velocity"][rows], np.zeros((2, 3))
    )
    # Without an index: the keys are the rows, the table grows to them;
    # Adagrad's accumulator restarts at its initial value.
    plain = _table(
        None, optimizer=("adagrad", {"initial_accumulator_value": 0.25})
    )
    plain_model, _ = row_sum_model(plain)
    _fit(plain_model, np.array([1, 0]), [1.0, 1.0])
    np.testing.assert_array_equal(plain.assign([6, 0], vectors), [6, 0])
    assert plain.capacity == 8
    np.testing.assert_array_equal(_numpy(plain.embeddings)[[6, 0]], vectors)
    accumulator = _slots(plain)["accumulator"]
    np.testing.assert_array_equal(accumulator[[6, 0]], np.full((2, 3), 0.25))
    assert accumulator[1].min() > 0.25  # trained, not assigned
