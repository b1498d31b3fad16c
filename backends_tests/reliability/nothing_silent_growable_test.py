"""Nothing silent in a `GrowableEmbedding`'s warm start and delta export
(issue 43): `assign` refuses keys that are not integer ids (floats,
strings, bools, negative keys, keys of 2**31 and more, up to 2**64) on a
table without a `key_index` as an eager call refuses them; refuses
vectors that are not finite once cast to the table's dtype, and ragged
vectors, naming `assign` and `vectors`; refuses keys that would take the
table past `max_capacity` before its unbounded index changes; does
nothing for an empty batch. `mark` / `delta` in a callback while Keras'
JAX trainer holds the state outside the variables raise a `RuntimeError`
that says to read `self.model` first (and work once it is read, as they
do on TensorFlow and torch); a delta on a loaded table since a mark of
the saved one says that marks do not survive loading.
"""

import keras
import numpy as np
import pytest

from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex
from kmodels.testing.row_sum import row_sum_model


def _table(index=None, max_capacity=None):
    return GrowableEmbedding(
        3,
        initial_capacity=4,
        max_capacity=max_capacity,
        optimizer=("sgd", {"learning_rate": 0.1}),
        seed=5,
        key_index=index,
        name="users",
    )


def _numpy(variable):
    return np.array(keras.ops.convert_to_numpy(variable.value))


def _fit(model, rows, callbacks=()):
    model.fit(
        np.asarray(rows, "int32").reshape(-1, 1),
        np.zeros(len(rows), "float32"),
        batch_size=len(rows),
        shuffle=False,
        verbose=0,
        callbacks=[EmbeddingGrowth(), *callbacks],
    )


@pytest.mark.parametrize(
    "keys, error, match",
    [
        ([1.5], TypeError, r"assign expects integer keys .* float key 1\.5"),
        (["3"], TypeError, r"assign expects integer keys .* str key '3'"),
        ([True], TypeError, r"assign expects integer keys .* bool key True"),
        ([2, True], TypeError, r"integer keys .* the bool key True\."),
        (np.array([1.0]), TypeError, r"integer keys .* got dtype float64\."),
        ([-1], ValueError, r"expects ids >= 0; got -1\."),
        ([2**31 + 5], ValueError, r"ids below 2\*\*31 .*got 2147483653\."),
        ([2**64], ValueError, r"ids below 2\*\*31 .*got 18446744073709551616"),
        ([-(2**64)], ValueError, r"ids >= 0; got -18446744073709551616\."),
    ],
)
def test_item_1_assign_without_index_refuses_keys_that_are_not_ids(
    keys, error, match
):
    table = _table()
    table.build()
    before = _numpy(table.embeddings)
    with pytest.raises(error, match=match):
        table.assign(keys, np.ones((len(keys), 3)))
    # Refused before anything changed: the table did not grow.
    assert table.capacity == 4
    np.testing.assert_array_equal(_numpy(table.embeddings), before)
    # An eager call refuses the same ids with the same error.
    if error is ValueError and abs(keys[0]) < 2**63:
        with pytest.raises(ValueError, match=match):
            table(np.array([keys]))


def test_item_1_keyed_assign_keeps_keys_as_given():
    # NumPy would make [2, True] ints and ["a", 1] strings; the index
    # refuses them as its own lookup does, and adds no key.
    for index, keys in (
        (KeyIndex(), [2, True]),
        (KeyIndex("string"), ["a", 1]),
    ):
        table = _table(index)
        with pytest.raises(TypeError) as refused:
            table.assign(keys, np.ones((2, 3)))
        with pytest.raises(TypeError) as by_lookup:
            index.lookup(keys)
        assert str(refused.value) == str(by_lookup.value)
        assert index.keys() == []


@pytest.mark.parametrize(
    "vectors, match",
    [
        (
            np.full((1, 3), 1e39),
            r"`vectors` must be finite in the table's dtype float32; "
            r"got 1e\+39",
        ),
        (np.array([[1.0, np.inf, 0.0]]), r"`vectors` hold NaN or infinite"),
    ],
)
def test_item_2_assign_refuses_vectors_not_finite_in_the_table_dtype(
    vectors, match
):
    table = _table(KeyIndex())
    table.build()
    before = _numpy(table.embeddings)
    with pytest.raises(ValueError, match=r"'users'\.assign: " + match):
        table.assign([7], vectors)
    assert table.key_index.keys() == []
    np.testing.assert_array_equal(_numpy(table.embeddings), before)


def test_item_3_refused_assign_leaves_index_and_table_as_they_were():
    index = KeyIndex()
    table = _table(index, max_capacity=8)
    table.build()
    before = _numpy(table.embeddings)
    # 10 new keys take rows 1 to 10: 11 rows.
    with pytest.raises(ValueError, match="cannot grow to 11 rows"):
        table.assign(list(range(10)), np.ones((10, 3)))
    assert index.keys() == [] and index.num_rows == 1
    assert table.capacity == 4
    np.testing.assert_array_equal(_numpy(table.embeddings), before)
    # The next new key takes the first row, 1.
    np.testing.assert_array_equal(table.assign([5], np.ones((1, 3))), [1])


@pytest.mark.parametrize("index", [None, "int64"])
def test_item_6_empty_assign_is_a_no_op(index):
    table = _table(None if index is None else KeyIndex(index))
    table.build()
    before = _numpy(table.embeddings)
    rows = table.assign([], np.zeros((0, 3)))
    assert rows.dtype == np.int64 and rows.shape == (0,)
    assert table.capacity == 4
    np.testing.assert_array_equal(_numpy(table.embeddings), before)


def test_item_19_ragged_vectors_name_assign_and_the_shape():
    table = _table(KeyIndex())
    with pytest.raises(
        ValueError,
        match=r"'users'\.assign expects vectors of shape \(len\(keys\), "
        r"output_dim\) = \(keys=2, output_dim=3\); got rows of different",
    ):
        table.assign([1, 2], [[1.0, 2.0, 3.0], [1.0, 2.0]])
    assert table.key_index.keys() == []


class _DeltaAtBatchEnd(keras.callbacks.Callback):
    """Takes a delta in `on_train_batch_end`, first without reading
    `self.model`, then after reading it."""

    def __init__(self, table, mark):
        super().__init__()
        self.table, self.mark = table, mark
        self.first = self.second = None

    def on_train_batch_end(self, batch, logs=None):
        try:
            self.first = self.table.delta(since=self.mark).rows
        except RuntimeError as error:
            self.first = error
        self.model  # noqa: B018 - writes the trainer's state back (JAX)
        self.second = self.table.delta(since=self.mark).rows


def test_item_16_delta_in_a_callback_says_to_read_self_model_first():
    table = _table()
    model, _ = row_sum_model(table)
    _fit(model, [1, 2])
    mark = table.mark()
    callback = _DeltaAtBatchEnd(table, mark)
    _fit(model, [2, 3], [callback])
    np.testing.assert_array_equal(callback.second, [2, 3])
    if keras.backend.backend() == "jax":
        assert isinstance(callback.first, RuntimeError)
        assert "read `self.model` first" in str(callback.first)
        assert "'users'.delta" in str(callback.first)
    else:
        np.testing.assert_array_equal(callback.first, [2, 3])


def test_item_17_delta_on_a_loaded_table_says_marks_do_not_survive(tmp_path):
    table = _table(KeyIndex())
    model, _ = row_sum_model(table)
    table.assign([10], np.ones((1, 3)))
    mark = table.mark()
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path).get_layer("users")
    with pytest.raises(ValueError, match="marks do not survive loading"):
        loaded.delta(since=mark)
    # A table of another name still gets the other message.
    other = GrowableEmbedding(3, initial_capacity=4, name="items")
    with pytest.raises(ValueError, match="is a mark of table 'users', not"):
        other.delta(since=mark)
