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
from kmodels.growable import delta
from kmodels.growable import slots


def assign(table, keys, vectors):
    """`GrowableEmbedding.assign`: returns the rows written, in the order
    of `keys`."""
    where = f"GrowableEmbedding '{table.name}'.assign"
    keys = _checked_keys(where, keys)
    vectors = _checked_vectors(where, vectors, len(keys), table.output_dim)
    index = table.key_index
    if not table.built:
        table.build()
    if table.table_optimizer is None:
        raise ValueError(
            f"{where}: the table has optimizer=None and does not know its "
            "optimizer's slots yet. Call table.follow_optimizer("
            "model.optimizer) (or fit once) before assign."
        )
    if index is None:
        rows = table.check_ids(np.asarray(keys, np.int64)).astype(np.int64)
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
    if isinstance(keys, (str, bytes, int, np.integer)):
        raise TypeError(
            f"{where} expects a 1-D list or array of keys; got the scalar "
            f"{keys!r}. Pass [{keys!r}]."
        )
    array = np.asarray(ops.convert_to_numpy(keys) if _is_tensor(keys) else keys)
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
    return keys


def _is_tensor(x):
    return not isinstance(x, (list, tuple, np.ndarray)) and hasattr(x, "shape")


def _checked_vectors(where, vectors, count, dim):
    array = np.asarray(
        ops.convert_to_numpy(vectors) if _is_tensor(vectors) else vectors
    )
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
        raise ValueError(f"{where}: the vectors hold NaN or infinite values.")
    return array
