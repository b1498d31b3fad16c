"""Sizing a `GrowableEmbedding`: how many rows it holds and what it
accepts. The geometric growth policy, the bound of its `key_index`, the ids
of a batch and the rows `reset_rows` restarts; each check raises the same
message on every backend, naming the layer.
"""

import math

import numpy as np
from keras import ops

from kmodels.backend import growth as growth_backend
from kmodels.backend import table_replicas


def round_up(n, multiple):
    """`n` rounded up to a multiple of `multiple`."""
    return -(-int(n) // int(multiple)) * int(multiple)


def required_capacity(layer, max_id):
    """`GrowableEmbedding.required_capacity`: the current capacity times
    the smallest power of `growth_factor` that fits `max_id`, capped at
    the row limit, rounded up to `row_multiple`."""
    capacity = layer.capacity
    if max_id < capacity:
        return capacity
    new = capacity
    while new <= max_id:
        new = max(new + 1, int(math.ceil(new * layer.growth_factor)))
    if layer.row_limit is not None:
        new = min(new, max(layer.row_limit, max_id + 1))
    return round_up(new, layer.row_multiple)


def check_key_index(layer):
    """`GrowableEmbedding.check_key_index`: a bounded index
    (`KeyIndex(max_capacity=n)`) needs a table with `max_capacity` `None`
    (the table then takes `n` as its limit) or `>= n`, and
    `initial_capacity <= n`."""
    bound = getattr(layer.key_index, "max_capacity", None)
    if bound is None:
        return
    where = f"GrowableEmbedding '{layer.name}'"
    if layer.max_capacity is not None and layer.max_capacity < bound:
        raise ValueError(
            f"{where} has max_capacity={layer.max_capacity}, smaller than "
            f"its key_index's max_capacity={bound}: the index hands out "
            f"rows up to {bound - 1}. Pass max_capacity=None (the table "
            f"takes the index's {bound}) or >= {bound}."
        )
    if layer.initial_capacity > bound:
        raise ValueError(
            f"{where} has initial_capacity={layer.initial_capacity}, more "
            f"than its key_index's max_capacity={bound}: rows past "
            f"{bound - 1} would never be used. Pass initial_capacity <= "
            f"{bound}."
        )


def checked_ids(layer, ids):
    """`GrowableEmbedding.check_ids`: concrete ids as a NumPy integer
    array, or a `TypeError` (not integers) or `ValueError` (negative, or
    past the row limit)."""
    ids = np.asarray(growth_backend.host_array(ids))
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(
            f"GrowableEmbedding '{layer.name}' expects integer ids; got "
            f"dtype {ids.dtype}. Map raw keys to rows with "
            "kmodels.layers.KeyIndex."
        )
    if ids.size:
        low, high = int(ids.min()), int(ids.max())
        if low < 0:
            raise ValueError(
                f"GrowableEmbedding '{layer.name}' expects ids >= 0; got {low}."
            )
        limit = layer.row_limit
        if limit is not None and high >= limit:
            whose = ""
            if layer.max_capacity is None:
                whose = " (its key_index's)"
            raise ValueError(
                f"GrowableEmbedding '{layer.name}' reached max_capacity="
                f"{limit}{whose}: got id {high}, which needs "
                f"{high + 1} rows. Raise max_capacity or remap ids."
            )
    return ids


def fit_concrete_ids(layer, features, training, updates):
    """Checks the concrete ids of a call's `features` (`checked_ids`);
    in training (with sparse `updates` on) grows the table so that they
    fit, at inference with `unseen="error"` refuses ids past it."""
    checked = np.concatenate(
        [layer.check_ids(ids).reshape(-1) for ids in features]
    )
    if training:
        if updates:
            layer._fit_checked_ids(_over_replicas(layer, checked))
    elif layer.unseen == "error" and checked.size:
        if int(checked.max()) >= layer.capacity:
            raise ValueError(
                f"GrowableEmbedding '{layer.name}' got unseen id "
                f"{int(checked.max())} at inference (capacity "
                f'{layer.capacity}) and unseen="error".'
            )


def rows_array(where, rows):
    """The rows given to `reset_rows` as a 1-D NumPy integer array, or a
    `TypeError` / `ValueError` that starts with `where`."""
    if isinstance(rows, (int, np.integer)) and not isinstance(rows, bool):
        raise TypeError(
            f"{where} expects a 1-D array or list of integer rows; got "
            f"the scalar {rows!r}. Pass [{rows!r}]."
        )
    array = np.asarray(ops.convert_to_numpy(rows))
    if array.ndim != 1:
        raise ValueError(
            f"{where} expects a 1-D array of rows; got shape {array.shape}."
        )
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise TypeError(
            f"{where} expects integer rows; got dtype {array.dtype}."
        )
    return array


def check_rows_in_range(where, rows, capacity):
    """Raises a `ValueError` unless the sorted `rows` are in
    `[0, capacity)`."""
    if rows[0] < 0 or rows[-1] >= capacity:
        bad = rows[0] if rows[0] < 0 else rows[-1]
        raise ValueError(
            f"{where} expects rows in [0, capacity={capacity}); got {int(bad)}."
        )


def _over_replicas(layer, ids):
    """`ids`, or, for a table that `kmodels.distributed.replicate_tables`
    made one replica of several, the largest id of any replica's batch:
    every replica grows alike, before the step."""
    if not table_replicas.is_replicated(layer):
        return ids
    high = table_replicas.largest_id(layer, int(ids.max()) if ids.size else -1)
    return np.array([high] if high >= 0 else [], np.int64)
