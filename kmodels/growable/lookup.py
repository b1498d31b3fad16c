"""How a `GrowableEmbedding` call reads its rows, and the sparse update
that training attaches to them.

- At inference (and for ids past the capacity) a plain gather: unseen ids
  get zeros or the `oov_id` row.
- In training, `kmodels.backend.growth.sparse_lookup`: differentiating
  through the rows runs the table's optimizer on the rows of the batch
  (`sparse_row_update`, in `keras.ops`, which the backends' backward
  passes call).
- Inside `kmodels.backend.growth.sparse_updates_disabled()`
  (`kmodels.diagnostics`), a plain gather with a dense gradient.
"""

import warnings

from keras import ops

from kmodels.backend import growth as growth_backend


def table_rows(layer, flat, keep, training, concrete, updates):
    """Rows of the flat int32 ids, `(n, output_dim)` in the layer's
    compute dtype. `keep`: optional boolean mask of `flat`; the other
    entries (padding of bags) train no row. `concrete`: the ids hold data
    (they fit: the table grew for them); `updates`: sparse updates are on
    (off inside `sparse_updates_disabled`)."""
    # Read from the variable, not a Python int: on TensorFlow a function
    # traced before a growth must see the new capacity.
    capacity = growth_backend.capacity_of(layer.embeddings)
    if training and layer.trainable and not updates:
        # A plain gather: the table gets an ordinary dense gradient and
        # nothing is written; ids past the capacity give zeros.
        seen = ops.logical_and(flat >= 0, flat < capacity)
        rows = ops.take(
            layer.embeddings.value, ops.where(seen, flat, 0), axis=0
        )
        rows = ops.where(ops.expand_dims(seen, -1), rows, 0)
    elif training and layer.trainable:
        if layer.table_optimizer is None:
            raise ValueError(unfollowed_optimizer_error(layer.name))
        if layer.compute_dtype == "float16" and not layer._warned_float16:
            layer._warned_float16 = True
            warnings.warn(float16_warning(layer.name), stacklevel=2)
        if concrete or layer.managed_growth:
            # Every id fits: grown by the call, or by EmbeddingGrowth
            # before the step.
            flat = ops.clip(flat, 0, capacity - 1)
            rows = growth_backend.sparse_lookup(layer, flat, seen=keep)
        else:
            rows = _unmanaged_rows(layer, flat, capacity, keep)
    else:
        seen = ops.logical_and(flat >= 0, flat < capacity)
        if layer.unseen == "oov":
            flat = ops.where(seen, flat, layer.oov_id)
            rows = ops.take(layer.embeddings.value, flat, axis=0)
        else:
            rows = ops.take(
                layer.embeddings.value, ops.where(seen, flat, 0), axis=0
            )
            rows = rows * ops.cast(ops.expand_dims(seen, -1), rows.dtype)
    return ops.cast(rows, layer.compute_dtype)


def _unmanaged_rows(layer, flat, capacity, keep=None):
    """Training lookup inside a compiled step without `EmbeddingGrowth`:
    the table cannot grow, so ids at or past the capacity (or negative)
    get zero vectors and move no row; the others train as usual (but
    the entries outside `keep`, padding of bags)."""
    if not layer._warned_unmanaged:
        layer._warned_unmanaged = True
        warnings.warn(
            unmanaged_growth_warning(layer.name, layer.capacity),
            stacklevel=3,
        )
    seen = ops.logical_and(flat >= 0, flat < capacity)
    if keep is not None:
        seen = ops.logical_and(seen, keep)
    rows = growth_backend.sparse_lookup(
        layer, ops.where(seen, flat, 0), seen=seen
    )
    return ops.where(ops.expand_dims(seen, -1), rows, 0)


def sparse_row_update(layer, gather, step, ids, grads, capacity, seen):
    """One step of the layer's optimizer on the rows of `ids` only.

    `gather(k, rows)` returns the given rows of the table (`k=0`) or of
    `layer.updated_slots[k - 1]` (the rule's slots, then `trained_at`):
    backends pass a sparse read (reading a whole TensorFlow variable
    before an in-place scatter would copy it).

    Gradients of repeated ids are summed first (as a dense gradient
    would). Returns `(rows, new_rows, new_slot_rows)` (`new_slot_rows`
    for `updated_slots`, the last one `trained_at`): `rows` holds each
    distinct id once, padded to `len(ids)` by repeating the first id
    with identical values, so a scatter of the result is deterministic
    on every backend.

    `seen`: optional boolean mask of `ids`. Entries where it is false
    add nothing, and a row that only such entries name keeps its values
    and slots (written back unchanged).
    """
    n = ops.shape(ids)[0]
    grads = ops.reshape(
        ops.cast(grads, layer.variable_dtype), (-1, layer.output_dim)
    )
    if seen is not None:
        grads = ops.where(ops.expand_dims(seen, -1), grads, 0)
    order = growth_backend.argsort_ids(ids, capacity)
    sorted_ids = ops.take(ids, order)
    sorted_grads = ops.take(grads, order, axis=0)
    starts = ops.concatenate(
        [
            ops.ones((1,), "int32"),
            ops.cast(ops.not_equal(sorted_ids[1:], sorted_ids[:-1]), "int32"),
        ]
    )
    segments = ops.cumsum(starts) - 1
    summed = ops.segment_sum(sorted_grads, segments, n)
    count = segments[-1] + 1
    valid = ops.arange(n, dtype="int32") < count
    rows = ops.segment_max(sorted_ids, segments, n)
    rows = ops.where(valid, rows, sorted_ids[0])
    current = gather(0, rows)
    old_slots = [gather(k + 1, rows) for k in range(len(layer.updated_slots))]
    new_rows, new_slots = layer.table_optimizer.update(
        step, current, old_slots[:-1], summed, layer.variable_dtype
    )
    # `trained_at`: the step after this update, on each row it writes.
    stamp = ops.cast(step, "float32") + 1.0
    new_slots = [*new_slots, ops.full((n, 1), 1.0, "float32") * stamp]
    if seen is not None:
        # Rows named only by unseen entries: written back unchanged.
        sorted_seen = ops.cast(ops.take(seen, order), "int32")
        touched = ops.expand_dims(
            ops.segment_max(sorted_seen, segments, n) > 0, -1
        )
        new_rows = ops.where(touched, new_rows, current)
        new_slots = [
            ops.where(touched, s, o) for s, o in zip(new_slots, old_slots)
        ]
    keep = ops.expand_dims(valid, -1)
    new_rows = ops.where(keep, new_rows, new_rows[:1])
    new_slots = [ops.where(keep, s, s[:1]) for s in new_slots]
    return rows, new_rows, new_slots


def float16_warning(name):
    """The one-time warning of a `GrowableEmbedding` that trains under a
    float16 policy, where Keras scales the loss by default."""
    return (
        f"GrowableEmbedding '{name}' trains under a float16 policy: its "
        "sparse optimizer runs in the backward pass and receives the "
        "gradients of the scaled loss (compile(auto_scale_loss=True) is "
        "the default under mixed_float16) without unscaling them, so an "
        "SGD table steps too far. Compile with auto_scale_loss=False, or "
        "use mixed_bfloat16."
    )


def unmanaged_growth_warning(name, capacity):
    """The one-time warning of a `GrowableEmbedding` that trains inside a
    compiled step without `EmbeddingGrowth`."""
    return (
        f"GrowableEmbedding '{name}' is training inside a compiled step "
        "without kmodels.callbacks.EmbeddingGrowth: the table cannot grow "
        f"there, so ids at or past its capacity ({capacity}) are treated as "
        "unseen: they get zero vectors and train no row (ids are not "
        "checked either). Pass callbacks=[kmodels.callbacks.EmbeddingGrowth()] "
        "to fit to grow the table for them."
    )


def repeated_call_error(name, how):
    """The error of a table called more than once (`how`, e.g. "2 times in
    model 'm'") where it trains: its sparse update runs once per call."""
    return (
        f"GrowableEmbedding '{name}' is called {how}; a table takes one "
        "call per step (its sparse update runs once per call). Share it "
        "between features with one call on a list of ids, e.g. "
        "`table([history, item])`, which returns one output per feature "
        "and sums their gradients before the single update."
    )


def unfollowed_optimizer_error(name):
    """The message of a `GrowableEmbedding(optimizer=None)` that trains
    before it knows the model's optimizer."""
    return (
        f"GrowableEmbedding '{name}' has optimizer=None (follow the model's "
        "optimizer) but has not read it: kmodels.callbacks.EmbeddingGrowth "
        "reads it when fit starts. Pass callbacks=[kmodels.callbacks."
        "EmbeddingGrowth()] to fit, call layer.follow_optimizer(optimizer) "
        "before a custom training loop, or give the table its own optimizer."
    )
