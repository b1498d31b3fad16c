"""KeyIndex: arbitrary keys to dense rows, growth, freezing, saving."""

import numpy as np
import pytest

from kmodels.layers import KeyIndex
from kmodels.testing.layer_contract import run_layer_test
from kmodels.testing.oracle.key_index import key_index_lookup


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


# ------------------------------------------------------- vectorised lookup
# `lookup` deduplicates long batches with a NumPy sort (of int64 keys, or of
# the strings' hashes) and looks short ones up key by key; every path must
# assign exactly the rows of the one-key-at-a-time reference.
_INT_POOL = [
    0,
    1,
    -1,
    7,
    2**31 - 1,
    10**12,
    -(10**12),
    2**63 - 1,
    -(2**63),
] + list(range(100, 160))
_STRING_POOL = ["a", "b", "é", "日本", "🙂", "sku-1", "sku-10", "", " "] + [
    f"user-{i}" for i in range(60)
]


def _int_input(flat, form, shape):
    if form == "int64":
        return np.array(flat, np.int64).reshape(shape)
    if form == "uint64":  # only for non-negative batches
        return np.array(flat, np.uint64).reshape(shape)
    if form == "numpy scalars":
        return [np.int64(k) if i % 2 else k for i, k in enumerate(flat)]
    return np.array(flat, dtype=object).reshape(shape).tolist()  # nested list


def _string_input(flat, form, shape):
    if form == "unicode array":
        return np.array(flat, dtype=str).reshape(shape)
    if form == "object array":
        return np.array(flat, dtype=object).reshape(shape)
    if form == "utf-8 bytes":
        return [k.encode("utf-8") for k in flat]
    if form == "mixed":
        return [
            (k.encode("utf-8"), np.str_(k), k)[i % 3]
            for i, k in enumerate(flat)
        ]
    return np.array(flat, dtype=object).reshape(shape).tolist()  # nested list


def _random_batch(rng, key_dtype, pool, size):
    """`(flat, batch, shape)`: a flat batch of reference keys, known and
    new, with repeats; the same batch as `lookup` input in a random form;
    the shape of its rows."""
    flat = [pool[i] for i in rng.integers(0, len(pool), size).tolist()]
    shape = (size,) if size % 2 or not size else (2, size // 2)
    if key_dtype == "string":
        forms = ["list", "unicode array", "object array", "utf-8 bytes"]
        form = forms[int(rng.integers(0, len(forms)))]
        form = "mixed" if rng.random() < 0.2 else form
        batch = _string_input(flat, form, shape)
        flat_forms = ("utf-8 bytes", "mixed")
    else:
        forms = ["list", "int64", "numpy scalars"]
        if all(k >= 0 for k in flat):
            forms.append("uint64")
        form = forms[int(rng.integers(0, len(forms)))]
        batch = _int_input(flat, form, shape)
        flat_forms = ("numpy scalars",)
    return flat, batch, (size,) if form in flat_forms else shape


def _check_against_reference(index, rng, key_dtype, steps, sizes):
    pool = list(_INT_POOL if key_dtype == "int64" else _STRING_POOL)
    rng.shuffle(pool)
    known = []
    for step in range(steps):
        if step == steps // 2:
            index.freeze()  # the second half: frozen, then a grow=False
        if step == 3 * steps // 4:
            index.unfreeze()
        grow = not index.frozen and step < 3 * steps // 4
        # New keys keep arriving: the pool widens step by step.
        visible = pool[: 4 + step * len(pool) // steps]
        size = int(sizes[step % len(sizes)])
        flat, batch, shape = _random_batch(rng, key_dtype, visible, size)
        try:
            expected, after = key_index_lookup(
                known, flat, grow, index.first_row, index.oov_row
            )
        except KeyError as missing:
            with pytest.raises(KeyError) as caught:
                index.lookup(batch, grow=None if grow else False)
            assert caught.value.args[0] == (
                f"KeyIndex '{index.name}' is frozen and has no row for key "
                f"{missing.args[0]!r}."
            )
            assert index.keys() == known
            continue
        rows = index.lookup(batch, grow=None if grow else False)
        assert rows.dtype == np.int64 and rows.shape == shape
        assert rows.reshape(-1).tolist() == expected, (step, flat)
        known = after
        assert index.keys() == known
        assert index.num_rows == index.first_row + len(known)
    return known


@pytest.mark.parametrize("key_dtype", ["int64", "string"])
@pytest.mark.parametrize("path", ["per key", "deduplicated", "hash clashes"])
@pytest.mark.parametrize(
    "first_row, oov_row", [(1, 0), (3, 1), (2, None), (0, 0)]
)
def test_lookup_matches_the_reference(
    monkeypatch, key_dtype, path, first_row, oov_row
):
    from kmodels.growable import key_batch as module

    if path == "per key":
        monkeypatch.setattr(
            module, "_DEDUPLICATE_FROM", {"int64": 10**9, "string": 10**9}
        )
    else:
        monkeypatch.setattr(
            module, "_DEDUPLICATE_FROM", {"int64": 1, "string": 1}
        )
    if path == "hash clashes":
        # Different strings with one hash: grouping by hash is not enough.
        monkeypatch.setattr(module, "hash", lambda s: len(s) % 3, raising=False)
    index = KeyIndex(key_dtype, first_row=first_row, oov_row=oov_row)
    rng = np.random.default_rng([first_row, len(path), len(key_dtype)])
    sizes = rng.integers(0, 60, 8).tolist() + [0, 1, 2]
    known = _check_against_reference(index, rng, key_dtype, 24, sizes)
    # The state saved after these batches is the reference's.
    store = {}
    index.save_own_variables(store)
    clone = KeyIndex.from_config(index.get_config())
    clone.load_own_variables(store)
    assert clone.keys() == known and clone.frozen == index.frozen


@pytest.mark.parametrize(
    "key_dtype, size", [("int64", 20_000), ("string", 70_000)]
)
def test_long_batches_match_the_reference(key_dtype, size):
    # Past the default sizes from which batches are deduplicated: a
    # realistic batch of repeated keys, half of them known.
    rng = np.random.default_rng(5)
    ids = rng.integers(0, size // 10, size)
    if key_dtype == "int64":
        keys = (ids * 1_000_003 - 10**12).tolist()
        known = keys[: size // 4 : 3]
    else:
        keys = [f"item-{i}" for i in ids.tolist()]
        known = keys[: size // 4 : 3]
    index = KeyIndex(key_dtype, first_row=1)
    index.lookup(known)
    expected, after = key_index_lookup(
        key_index_lookup([], known, True)[1], keys, True
    )
    batch = np.array(keys, np.int64 if key_dtype == "int64" else str)
    assert index.lookup(batch).tolist() == expected
    assert index.keys() == after
    index.freeze()
    unknown = batch[::-1].copy()
    unknown[:7] = -5 if key_dtype == "int64" else "never seen"
    expected, _ = key_index_lookup(after, unknown.tolist(), False)
    assert index.lookup(unknown).tolist() == expected
    assert expected[:7] == [0] * 7 and index.keys() == after
