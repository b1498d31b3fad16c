"""A batch of keys for `KeyIndex.lookup`: checked, flattened and, when
long, reduced to its distinct keys.

The checks read no state of the index: `lookup` runs them before it takes
its lock, so that threads wait only for the index's own work.
"""

import numpy as np

# Batch sizes from which `KeyIndex.lookup` first reduces a batch to its
# distinct keys; below, one dict lookup per key is faster (measured: string
# keys cost a hash and a set insertion each to deduplicate).
_DEDUPLICATE_FROM = {"int64": 8192, "string": 65536}
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def refuse(name, error, key, position, expected):
    """Raises `error` naming the index, what it takes and the bad key."""
    # `str` of NumPy numbers: their `repr` differs across NumPy versions.
    shown = repr(key) if isinstance(key, (str, bytes)) else str(key)
    raise error(
        f"KeyIndex '{name}' has {expected}; got "
        f"{type(key).__name__} {shown} at position {position} of the "
        "batch (flattened). No key of this batch was added."
    )


def checked_keys(keys, key_dtype, name):
    """`(shape, flat)` of a batch: its shape and its keys, checked, as a
    flat int64 array or a list of `str`; or raises (naming index `name`).

    int64 keys must be integers in `[-2**63, 2**63)` (Python or NumPy
    ints, or an integer NumPy array), string keys `str` encodable as UTF-8
    or UTF-8 `bytes`. A wrong type raises a `TypeError`, a value that
    could not be saved a `ValueError`.
    """
    plain = str if key_dtype == "string" else int
    if type(keys) is list and set(map(type, keys)) <= {plain}:
        # A flat list of plain keys needs no NumPy object array.
        if plain is str:
            return (len(keys),), _utf8(keys, name)
        return (len(keys),), _int64(keys, keys, name)
    if not isinstance(keys, np.ndarray) or keys.dtype.kind == "b":
        keys = np.asarray(keys, dtype=object)
    if key_dtype == "string":
        return keys.shape, _string_keys(keys, name)
    return keys.shape, _int_keys(keys, name)


def grouped_keys(flat, key_dtype):
    """`(distinct, first, inverse)` of a long checked batch (see
    `_distinct_ints`), or `None` for a short one (looked up key by key) or
    when two string keys share a hash."""
    if len(flat) < _DEDUPLICATE_FROM[key_dtype]:
        return None
    if key_dtype == "string":
        return _distinct_strings(flat)
    return _distinct_ints(flat)


def _int_keys(keys, name):
    """The batch as a flat int64 NumPy array, or raises."""
    if keys.dtype.kind in "iu":
        flat = keys.reshape(-1)
        if flat.size and flat.dtype.kind == "u":
            top = flat.argmax()
            if int(flat[top]) > _INT64_MAX:
                refuse(
                    name,
                    ValueError,
                    flat[top],
                    int(top),
                    "int64 keys, in [-2**63, 2**63)",
                )
        return flat.astype(np.int64, copy=False)
    raw = flat = keys.reshape(-1).tolist()
    # `set(map(type, ...))` checks every key at C speed; the loop below
    # only runs to name the first bad key or to convert NumPy ints.
    if not set(map(type, raw)) <= {int}:
        for i, key in enumerate(raw):
            if isinstance(key, (bool, np.bool_)) or not isinstance(
                key, (int, np.integer)
            ):
                refuse(name, TypeError, key, i, "int64 keys")
        flat = [int(key) for key in raw]
    return _int64(flat, raw, name)


def _int64(flat, raw, name):
    """`flat`, a list of Python ints (`raw` as given), as an int64 array,
    or raises."""
    try:
        return np.array(flat, dtype=np.int64).reshape(-1)
    except OverflowError:
        for i, key in enumerate(flat):
            if not _INT64_MIN <= key <= _INT64_MAX:
                refuse(
                    name,
                    ValueError,
                    raw[i],
                    i,
                    "int64 keys, in [-2**63, 2**63)",
                )
        raise


def _string_keys(keys, name):
    """The batch as a list of `str` encodable as UTF-8, or raises."""
    flat = keys.reshape(-1).tolist()
    if not set(map(type, flat)) <= {str}:
        for i, key in enumerate(flat):
            if isinstance(key, bytes):
                try:
                    flat[i] = key.decode("utf-8")
                except UnicodeDecodeError:
                    refuse(
                        name, ValueError, key, i, "string keys (UTF-8 bytes)"
                    )
            elif isinstance(key, str):
                flat[i] = str(key)
            else:
                refuse(name, TypeError, key, i, "string keys")
    return _utf8(flat, name)


def _utf8(flat, name):
    """`flat`, a list of `str`, if UTF-8 can encode every one."""
    try:
        "".join(flat).encode("utf-8")
    except UnicodeEncodeError:
        for i, key in enumerate(flat):
            try:
                key.encode("utf-8")
            except UnicodeEncodeError:
                refuse(
                    name,
                    ValueError,
                    key,
                    i,
                    "string keys encodable as UTF-8 (no lone surrogates)",
                )
    return flat


def _groups(values):
    """`(first, inverse)` of a flat NumPy array: the position where each
    distinct value first appears (in sorted order of the values) and, for
    every position, the index of its value in `first`."""
    # An unstable sort is several times faster than a stable one; ties are
    # resolved by taking the smallest position of each run.
    if not values.size:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    order = np.argsort(values)
    ordered = values[order]
    starts = np.empty(values.size, dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    bounds = np.flatnonzero(starts)
    first = np.minimum.reduceat(order, bounds)
    inverse = np.empty(values.size, dtype=np.intp)
    inverse[order] = np.repeat(
        np.arange(bounds.size), np.diff(bounds, append=values.size)
    )
    return first, inverse


def _distinct_ints(flat):
    """`(distinct, first, inverse)` of a flat int64 array: its distinct keys
    as Python ints, the position where each first appears, and for every
    position the index of its key in `distinct`."""
    first, inverse = _groups(flat)
    return flat[first].tolist(), first, inverse


def _distinct_strings(flat):
    """`(distinct, first, inverse)` of a list of `str`, as
    `_distinct_ints`, or `None` when two of its keys share a hash."""
    # Grouped by Python's (cached, 64-bit) string hash with a NumPy sort.
    # Equal keys share a hash, so there are at least as many distinct keys
    # as hash groups; as many means no two keys share a group: exact.
    hashes = np.fromiter(map(hash, flat), dtype=np.int64, count=len(flat))
    first, inverse = _groups(hashes)
    if len(first) != len(set(flat)):
        return None  # Two keys share a hash: look every key up instead.
    return list(map(flat.__getitem__, first.tolist())), first, inverse
