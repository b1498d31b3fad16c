"""KeyIndex: arbitrary keys to dense rows, growth, freezing, saving."""

import numpy as np
import pytest

from kmodels.layers import KeyIndex
from kmodels.testing.layer_contract import run_layer_test


@pytest.mark.parametrize("key_dtype", ["int64", "string"])
def test_layer_contract(key_dtype):
    # Config and serialization only: KeyIndex is a data-pipeline layer. It
    # is never called on tensors (`lookup` maps NumPy keys, strings
    # included, to int64 rows outside the model), holds no weights and has
    # no dtype policy, so the build, symbolic/eager, precision, mask and
    # training checks do not apply. Its state (the keys) is saved through
    # `save_own_variables`: below, and inside a `.keras` file with the
    # `GrowableEmbedding` it is attached to (growable_embedding_test.py).
    index = run_layer_test(
        KeyIndex,
        dict(key_dtype=key_dtype, first_row=2, oov_row=1, frozen=True),
    )
    assert index.frozen and index.first_row == 2 and index.oov_row == 1


def test_int64_keys_map_to_dense_rows_in_arrival_order():
    index = KeyIndex("int64")
    keys = np.array([[10**12, 5], [10**12, -3]], np.int64)
    np.testing.assert_array_equal(index.lookup(keys), [[1, 2], [1, 3]])
    assert index.num_rows == 4 and len(index) == 3
    assert index.keys() == [10**12, 5, -3]


def test_string_keys_and_freezing():
    index = KeyIndex("string", first_row=2, oov_row=1)
    np.testing.assert_array_equal(index.lookup(["b", "a", "b"]), [2, 3, 2])
    index.freeze()
    np.testing.assert_array_equal(index.lookup(["a", "zz"]), [3, 1])
    assert len(index) == 2
    strict = KeyIndex("string", oov_row=None, frozen=True)
    with pytest.raises(KeyError, match="is frozen and has no row for key 'x'"):
        strict.lookup(["x"])
    with pytest.raises(TypeError, match="has string keys; got int 3"):
        index.lookup([3])
    with pytest.raises(TypeError, match="has int64 keys; got str 'a'"):
        KeyIndex("int64").lookup(["a"])


def test_save_and_load_own_variables():
    for dtype, keys in (("string", ["é", "b", "ccc"]), ("int64", [7, 2**40])):
        index = KeyIndex(dtype)
        index.lookup(keys)
        index.freeze()
        store = {}
        index.save_own_variables(store)
        clone = KeyIndex.from_config(index.get_config())
        clone.load_own_variables(store)
        assert clone.keys() == keys and clone.frozen
        np.testing.assert_array_equal(
            clone.lookup(keys), np.arange(1, len(keys) + 1)
        )
