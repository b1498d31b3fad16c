"""Warm start of a `GrowableEmbedding`: pretrained vectors for given keys.

`table.assign(keys, vectors)` gives the keys rows through the table's
`key_index` (a growing lookup: new keys get rows, a full bounded index
evicts by its policy or refuses the batch with its own `ValueError`), or
takes the keys as rows when the table has none, grows the table to hold
them, writes the vectors into those rows and sets their optimizer slots
to their initial values. The rows are ordinary rows from then on: saved,
loaded, trained, and in the next delta.
"""

import numpy as np
from keras import ops

from kmodels.backend import growth as growth_backend
from kmodels.contracts.checks import check_growable_ids
from kmodels.growable import delta
from kmodels.growable import sizing
from kmodels.growable import slots
from kmodels.growable.key_batch import checked_keys


def assign(table, keys, vectors):
    """`GrowableEmbedding.assign`: returns the rows written, in the order
    of `keys`."""
    where = f"GrowableEmbedding '{table.name}'.assign"
    keys, array = _checked_keys(where, keys)
    vectors = _checked_vectors(
        where, vectors, len(keys), table.output_dim, table.variable_dtype
    )
    index = table.key_index
    if index is None:
        # The keys are ids: refused as a call refuses them, before the
        # table changes (`np.asarray(keys, np.int64)` would turn 1.5, "3"
        # and True into rows, and 2**64 into an OverflowError).
        ids = _checked_ids(table, where, keys, array)
    if not table.built:
        table.build()
    delta.check_synced(table, where)
    if table.table_optimizer is None:
        raise ValueError(
            f"{where}: the table has optimizer=None and does not know its "
            "optimizer's slots yet. Call table.follow_optimizer("
            "model.optimizer) (or fit once) before assign."
        )
    if not keys:
        # Nothing to write; a growing lookup would still count as one for
        # a time-to-live.
        return np.zeros(0, np.int64)
    if index is None:
        rows = ids
    else:
        if index.min_count > 1:
            raise ValueError(
                f"{where}: KeyIndex '{index.name}' has min_count="
                f"{index.min_count}; a warm start gives keys rows at once, "
                "which its admission rule would delay. Warm-start a table "
                "whose index has min_count=1."
            )
        if index.frozen:
            raise ValueError(
                f"{where}: KeyIndex '{index.name}' is frozen: it gives no "
                "row to a new key. Call index.unfreeze() first."
            )
        # A growing lookup: new keys get rows, a full bounded index
        # evicts by its policy (or refuses the batch, changing nothing).
        # Under the index's lock, so that the rows checked are the rows
        # the lookup hands out.
        with index._index_lock:
            _check_room(table, where, index, keys)
            rows = index.lookup(keys, grow=True).astype(np.int64)
    table._fit_checked_ids(rows)
    order = np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    growth_backend.write_rows(
        table.embeddings,
        sorted_rows,
        vectors[order].astype(table.variable_dtype),
    )
    slots.reset_rows(table, sorted_rows)
    if index is not None:
        # These rows are restarted here: a reset queued by the lookup's
        # evictions would wipe the vectors before the next step.
        with index._index_lock:
            index._resets.difference_update(sorted_rows.tolist())
    delta.stamp_rows(table, sorted_rows)
    return rows


def _checked_keys(where, keys):
    """`(keys, array)`: the distinct keys as a list and as a 1-D NumPy
    array; a list or tuple is kept as given (an object array): NumPy would
    turn `[2, True]` into ints and `["a", 1]` into strings."""
    if isinstance(keys, (str, bytes, int, np.integer)):
        raise TypeError(
            f"{where} expects a 1-D list or array of keys; got the scalar "
            f"{keys!r}. Pass [{keys!r}]."
        )
    if isinstance(keys, (list, tuple)):
        array = np.asarray(keys, dtype=object)
        if array.ndim == 1 and any(map(_is_sequence, keys)):
            # Ragged rows, which an object array holds one by one.
            raise ValueError(
                f"{where} expects a 1-D list or array of keys; got nested "
                "sequences of different lengths."
            )
    else:
        array = np.asarray(
            ops.convert_to_numpy(keys) if _is_tensor(keys) else keys
        )
    if array.ndim != 1:
        raise ValueError(
            f"{where} expects a 1-D list or array of keys; got shape "
            f"{array.shape}."
        )
    keys = array.tolist()
    if len(set(keys)) != len(keys):
        seen = set()
        repeated = next(k for k in keys if k in seen or seen.add(k))
        raise ValueError(
            f"{where}: key {repeated!r} appears more than once; give each "
            "key one vector."
        )
    return keys, array


def _is_sequence(key):
    return isinstance(key, (list, tuple, np.ndarray))


def _checked_ids(table, where, keys, array):
    """The keys of a table without a `key_index` as int64 rows, checked as
    an eager call checks ids: `TypeError` for keys that are not integers,
    `ValueError` for negative ones, ones past `max_capacity` or 2**31."""
    if not keys:
        return np.zeros(0, np.int64)
    if array.dtype.kind == "O":
        bad = next((k for k in keys if not _is_int(k)), None)
        if bad is not None:
            raise TypeError(
                f"{where} expects integer keys (ids) for a table without a "
                f"key_index; got the {type(bad).__name__} key {bad!r}. Map "
                "raw keys to rows with kmodels.layers.KeyIndex."
            )
        low, high = int(min(keys)), int(max(keys))
        if low < 0:
            raise ValueError(
                f"GrowableEmbedding '{table.name}' expects ids >= 0; got {low}."
            )
        if high >= 2**64:
            # Past 64 bits: an id a call refuses for its size (it gets it
            # as an object array, refused for its dtype).
            raise ValueError(
                f"GrowableEmbedding '{table.name}' expects ids below 2**31 "
                f"(rows are int32); got {high}."
            )
        array = np.asarray(keys, np.uint64)
    elif array.dtype.kind not in "iu":
        raise TypeError(
            f"{where} expects integer keys (ids) for a table without a "
            f"key_index; got dtype {array.dtype}. Map raw keys to rows "
            "with kmodels.layers.KeyIndex."
        )
    return check_growable_ids(table, array, training=True).astype(np.int64)


def _is_int(key):
    return isinstance(key, (int, np.integer)) and not isinstance(
        key, (bool, np.bool_)
    )


def _check_room(table, where, index, keys):
    """Refuses, before the unbounded `index` changes, `keys` whose new
    rows would take the table past its `max_capacity` (a bounded index
    hands out rows below its own bound, which the table holds). Called
    under the index's lock."""
    limit = table.row_limit
    if limit is None or index.max_capacity is not None:
        return
    _, flat = checked_keys(keys, index.key_dtype, index.name)
    flat = flat.tolist() if isinstance(flat, np.ndarray) else list(flat)
    held = index._rows
    new = [key for key in flat if key not in held]
    expiry = index._expiry
    if expiry is not None:
        # As the lookup does (`admission.admit`): keys that expire at it
        # are new too; new keys take the rows expired keys free first.
        expired = expiry.due(expiry.now(index))
        gone = set(expired)
        new += [key for key in flat if held.get(key, -1) in gone]
        grown = len(new) - min(len(new), len(expiry.free) + len(expired))
    else:
        grown = len(new)
    if not grown:
        return
    top = index.num_rows + grown - 1
    capacity = table.required_capacity(top)
    if capacity > sizing.round_up(limit, table.row_multiple):
        raise ValueError(
            f"{where}: the new keys would take rows up to {top}, and "
            f"GrowableEmbedding '{table.name}' cannot grow to "
            f"{capacity} rows: max_capacity={limit}. No key was added to "
            f"KeyIndex '{index.name}'. Raise max_capacity, or assign fewer "
            "keys."
        )


def _is_tensor(x):
    return not isinstance(x, (list, tuple, np.ndarray)) and hasattr(x, "shape")


def _checked_vectors(where, vectors, count, dim, dtype):
    """`vectors` as a NumPy array of shape `(count, dim)`, finite in the
    table's `dtype`."""
    try:
        array = np.asarray(
            ops.convert_to_numpy(vectors) if _is_tensor(vectors) else vectors
        )
    except ValueError as error:
        # Ragged rows: NumPy's message names neither the method nor the
        # shape it needs.
        raise ValueError(
            f"{where} expects vectors of shape (len(keys), output_dim) = "
            f"(keys={count}, output_dim={dim}); got rows of different "
            f"lengths ({error})"
        ) from None
    if array.dtype.kind not in "fiu" or array.dtype == np.bool_:
        raise TypeError(
            f"{where} expects float vectors; got dtype {array.dtype}."
        )
    if array.shape != (count, dim):
        raise ValueError(
            f"{where} expects vectors of shape (keys={count}, "
            f"output_dim={dim}); got {array.shape}."
        )
    if not np.all(np.isfinite(array)):
        raise ValueError(
            f"{where}: `vectors` hold NaN or infinite values; got "
            f"{_first_bad(array, ~np.isfinite(array))}."
        )
    with np.errstate(over="ignore"):
        cast = array.astype(dtype)
    overflow = ~np.isfinite(cast)
    if overflow.any():
        # Finite here, infinite in the table: 1e39 is inf in float32.
        raise ValueError(
            f"{where}: `vectors` must be finite in the table's dtype "
            f"{dtype}; got {_first_bad(array, overflow)} (dtype "
            f"{array.dtype}), which overflows to infinity there (NaN or "
            "infinite values)."
        )
    return array


def _first_bad(array, bad):
    return repr(array[bad].reshape(-1)[0].item())
