"""KeyIndex refuses what it could not save, and a refused call adds nothing.

Issue #16: a `KeyIndex` holding key 2**63 made `model.save` fail with an
`OverflowError` (after truncating the previous file); `lookup(['a', 'b', 3])`
raised but kept rows for 'a' and 'b'; crafted key lengths in a weights file
turned keys into other keys. Each case runs on every backend.
"""

import re
import warnings

import keras
import numpy as np
import pytest

from kmodels.callbacks import EmbeddingGrowth
from kmodels.layers import GrowableEmbedding
from kmodels.layers import KeyIndex


def _state(index):
    return index.keys(), index.num_rows, len(index), index.frozen


def _refused(index, error, message, keys, **kwargs):
    """`index.lookup(keys)` raises `error` with exactly `message`, and the
    index is unchanged."""
    before = _state(index)
    with pytest.raises(error) as caught:
        index.lookup(keys, **kwargs)
    assert caught.value.args[0] == message
    assert _state(index) == before


def _ready(dtype, keys):
    index = KeyIndex(dtype, name="ids")
    index.lookup(keys)
    return index


# ------------------------------------------------------------------ lookup
def test_int64_keys_outside_int64_are_refused_whole_batch():
    index = _ready("int64", [7, -(2**63), 2**63 - 1])
    tail = " of the batch (flattened). No key of this batch was added."
    _refused(
        index,
        ValueError,
        "KeyIndex 'ids' has int64 keys, in [-2**63, 2**63); got int "
        f"9223372036854775808 at position 1{tail}",
        [5, 2**63],
    )
    _refused(
        index,
        ValueError,
        "KeyIndex 'ids' has int64 keys, in [-2**63, 2**63); got int "
        f"-9223372036854775809 at position 2{tail}",
        [[5, 6], [-(2**63) - 1, 8]],
    )
    _refused(
        index,
        ValueError,
        "KeyIndex 'ids' has int64 keys, in [-2**63, 2**63); got uint64 "
        f"9223372036854775808 at position 1{tail}",
        np.array([5, 2**63], np.uint64),
    )
    _refused(
        index,
        ValueError,
        "KeyIndex 'ids' has int64 keys, in [-2**63, 2**63); got uint64 "
        f"18446744073709551615 at position 0{tail}",
        [np.uint64(2**64 - 1)],
    )
    # The int64 bounds themselves are keys, from lists and arrays alike.
    np.testing.assert_array_equal(
        index.lookup(np.array([2**63 - 1, 9], np.uint64)), [3, 4]
    )
    assert index.keys() == [7, -(2**63), 2**63 - 1, 9]


def test_wrong_key_types_are_refused_whole_batch():
    tail = " of the batch (flattened). No key of this batch was added."
    strings = _ready("string", ["z"])
    _refused(
        strings,
        TypeError,
        f"KeyIndex 'ids' has string keys; got int 3 at position 2{tail}",
        ["a", "b", 3],
    )
    assert strings.keys() == ["z"]
    ints = _ready("int64", [1])
    _refused(
        ints,
        TypeError,
        f"KeyIndex 'ids' has int64 keys; got str 'a' at position 1{tail}",
        [4, "a"],
    )
    _refused(
        ints,
        TypeError,
        f"KeyIndex 'ids' has int64 keys; got bool True at position 0{tail}",
        np.array([True, False]),
    )
    _refused(
        ints,
        TypeError,
        f"KeyIndex 'ids' has int64 keys; got float 1.0 at position 0{tail}",
        np.array([1.0, 2.0]),
    )


def test_strings_that_utf8_cannot_hold_are_refused():
    tail = " of the batch (flattened). No key of this batch was added."
    index = _ready("string", ["é"])
    _refused(
        index,
        ValueError,
        "KeyIndex 'ids' has string keys encodable as UTF-8 (no lone "
        f"surrogates); got str '\\ud800' at position 1{tail}",
        ["new", "\ud800"],
    )
    _refused(
        index,
        ValueError,
        "KeyIndex 'ids' has string keys (UTF-8 bytes); got bytes b'\\xff' "
        f"at position 1{tail}",
        [b"new", b"\xff"],
    )
    # UTF-8 bytes and NumPy strings are the same keys as `str`.
    np.testing.assert_array_equal(
        index.lookup([b"\xc3\xa9", np.str_("x"), "x"]), [1, 2, 2]
    )
    assert index.keys() == ["é", "x"]


def test_frozen_unknown_key_raises_and_adds_nothing():
    index = _ready("string", ["a"])
    index.freeze()
    strict = KeyIndex("string", oov_row=None, name="ids")
    strict.lookup(["a"])
    strict.freeze()
    _refused(
        strict,
        KeyError,
        "KeyIndex 'ids' is frozen and has no row for key 'b'.",
        ["a", "b"],
    )
    _refused(index, ValueError, "KeyIndex 'ids' is frozen.", ["b"], grow=True)
    np.testing.assert_array_equal(index.lookup(["a", "b"]), [1, 0])
    assert index.keys() == ["a"]


def test_saving_after_a_refused_key_keeps_the_model_savable(tmp_path):
    """The probe: a key of 2**63 used to sit in the index and make every
    later `model.save` raise `OverflowError`."""
    index = KeyIndex("int64")
    table = GrowableEmbedding(4, initial_capacity=4, seed=1, key_index=index)
    ids = keras.Input(shape=(None,), dtype="int32")
    model = keras.Model(ids, keras.ops.sum(table(ids), axis=-1))
    model.compile(optimizer="sgd", loss="mse")
    x = index.lookup(np.array([[10**12, 5], [2**63 - 1, 5]])).astype("int32")
    model.fit(x, np.zeros((2, 2)), verbose=0, callbacks=[EmbeddingGrowth()])
    path = str(tmp_path / "model.keras")
    model.save(path)
    with pytest.raises(ValueError, match=re.escape("got int 9223372036854")):
        index.lookup([7, 2**63])
    model.save(path)
    loaded = keras.saving.load_model(path)
    keys = [layer for layer in loaded.layers if hasattr(layer, "key_index")]
    assert keys[0].key_index.keys() == [10**12, 5, 2**63 - 1]


# -------------------------------------------------------------- constructor
@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"key_dtype": "int32"},
            "KeyIndex: `key_dtype` must be one of ('int64', 'string'); got "
            "'int32' (str).",
        ),
        (
            {"first_row": -1},
            "KeyIndex: `first_row` must be an integer >= 0; got -1 (int).",
        ),
        (
            {"first_row": 1.5},
            "KeyIndex: `first_row` must be an integer >= 0; got 1.5 (float).",
        ),
        (
            {"first_row": "1"},
            "KeyIndex: `first_row` must be an integer >= 0; got '1' (str).",
        ),
        (
            {"oov_row": True},
            "KeyIndex: `oov_row` must be an integer >= 0; got True (bool).",
        ),
        (
            {"first_row": 2, "oov_row": 2},
            "KeyIndex: `oov_row` must be a reserved row in [0, first_row=2)"
            "; got 2.",
        ),
        (
            {"frozen": "False"},
            "KeyIndex: `frozen` must be True or False; got 'False' (str).",
        ),
    ],
)
def test_constructor_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError) as caught:
        KeyIndex(**kwargs)
    assert str(caught.value) == message


def test_numpy_arguments_and_config_round_trip():
    index = KeyIndex("string", first_row=np.int64(3), oov_row=np.int32(2))
    assert type(index.first_row) is int and index.oov_row == 2
    config = index.get_config()
    assert KeyIndex.from_config(config).get_config() == config


# ------------------------------------------------------------- saved state
def _saved(dtype, keys):
    index = _ready(dtype, keys)
    store = {}
    index.save_own_variables(store)
    return store


def _load_refused(store, message, dtype="string"):
    """Loading `store` raises `message` and leaves a live index as it was."""
    index = _ready(dtype, ["live"] if dtype == "string" else [42])
    before = _state(index)
    with pytest.raises(ValueError) as caught:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            index.load_own_variables(store)
    assert str(caught.value) == message
    assert _state(index) == before


def test_crafted_key_lengths_fail_the_checksum():
    store = _saved("string", ["a", "b", "c"])
    store["key_lengths"] = np.array([2, 0, 1], np.int64)  # "ab", "", "c"
    stored = int(store["checksum"][1])
    actual = _crc32(store["key_lengths"])
    _load_refused(
        store,
        "KeyIndex 'ids': saved entry 'key_lengths' does not match its "
        f"checksum (CRC32 stored {stored:#010x}, computed {actual:#010x} "
        "over dtype int64, shape (3,) and bytes). The weights file is "
        "corrupted.",
    )


def test_checksum_entry_is_the_documented_crc32():
    store = _saved("int64", [3, -4])
    expected = [_crc32(store["keys"]), _crc32(store["frozen"])]
    np.testing.assert_array_equal(store["checksum"], expected)


@pytest.mark.parametrize(
    "lengths, message",
    [
        (
            [2, 0, 2],
            "saved entry 'key_lengths' sums to 4 bytes but 'key_bytes' "
            "holds 3. The weights file is corrupted.",
        ),
        (
            [4, -1, 0],
            "saved entry 'key_lengths' holds a negative length (-1). The "
            "weights file is corrupted.",
        ),
        (
            [1, 1, 0, 1],
            "the saved keys hold 'a' twice; each key has one row, so the "
            "rows after it would shift. The weights file is corrupted.",
        ),
        (
            [[1, 1, 1]],
            "saved entry 'key_lengths' must be a 1-D integer array; got "
            "shape (1, 3), dtype int64.",
        ),
    ],
)
def test_unchecksummed_state_is_still_checked_for_structure(lengths, message):
    """Without a checksum (files saved before it existed) the structure is
    still verified; the keys "a", "b", "a" below are crafted so that the
    last split reads a duplicate."""
    store = _saved("string", ["a", "b", "c"])
    store["key_bytes"] = np.frombuffer(b"aba", np.uint8)
    store["key_lengths"] = np.array(lengths, np.int64)
    del store["checksum"]
    _load_refused(store, f"KeyIndex 'ids': {message}")


def test_invalid_utf8_and_duplicate_int_keys_are_refused():
    store = _saved("string", ["ab"])
    store["key_bytes"] = np.frombuffer(b"a\xff", np.uint8)
    del store["checksum"]
    _load_refused(
        store,
        "KeyIndex 'ids': saved key 0 (b'a\\xff') is not valid UTF-8. The "
        "weights file is corrupted.",
    )
    store = _saved("int64", [5, 6])
    store["keys"] = np.array([5, 5], np.int64)
    del store["checksum"]
    _load_refused(
        store,
        "KeyIndex 'ids': the saved keys hold 5 twice; each key has one row, "
        "so the rows after it would shift. The weights file is corrupted.",
        dtype="int64",
    )
    _load_refused(
        {"frozen": np.array(0)},
        "KeyIndex 'ids': the saved state has no entry 'keys' (it has "
        "['frozen']; expected ['keys', 'frozen']). Was it saved by a layer "
        "with another configuration?",
        dtype="int64",
    )


def test_state_saved_without_checksum_loads_with_a_warning():
    store = _saved("string", ["é", "b"])
    del store["checksum"]
    index = KeyIndex("string", name="ids")
    with pytest.warns(UserWarning) as caught:
        index.load_own_variables(store)
    assert [str(w.message) for w in caught] == [
        "KeyIndex 'ids': the saved state has no checksum (saved before "
        "kmodels stored one); it is loaded without verification."
    ]
    assert index.keys() == ["é", "b"]


def _crc32(value):
    """The documented checksum, computed here independently: CRC32 of the
    entry's dtype name and shape (as text), then of its bytes."""
    import zlib

    value = np.ascontiguousarray(value)
    header = f"{value.dtype.name}{value.shape}".encode()
    return zlib.crc32(value.tobytes(), zlib.crc32(header))
