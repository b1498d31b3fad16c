"""Replicas of a growable table, one per process (torch
`DistributedDataParallel`).

`kmodels.distributed.replicate_tables` marks the `GrowableEmbedding` tables
of a model that every process of a torch DDP job trains: after the mark,

- every replica grows for the largest id of any replica's batch
  (`largest_id`, an all-reduce before the table grows), so the capacity
  stays the same everywhere;
- the sparse update in the backward pass all-gathers every replica's
  (ids, gradients) in rank order and applies the same combined update on
  each, the gradients divided by the number of processes as DDP averages
  the dense ones: each replica writes the rows one process would write for
  the global batch;
- the table's step counter is incremented in place by that update, not
  through a gradient (DDP is told to ignore it, and torch optimizers skip a
  parameter without a gradient).

On TensorFlow and JAX `replicate` raises: `tf.distribute` and
`keras.distribution` are their engines (docs/distributed.md).
"""

import keras

from kmodels.backend import native_function

# The data-parallel engines of the backends without `replicate`.
_ENGINES = {
    "tensorflow": "On TensorFlow, tf.distribute.MirroredStrategy is the "
    "data-parallel engine",
    "jax": "On JAX, keras.distribution (DataParallel, shard_embedding_rows) "
    "is the engine",
}


def replicate(model, tables):
    """Marks `tables` (the built `GrowableEmbedding` layers of `model`) as
    replicated over the processes of the default torch process group: checks
    that every process holds a table of the same name and capacity, copies
    rank 0's seed, rows, optimizer slots and step to every rank, and tells
    DDP to leave the step counters alone. A collective: every process calls
    it, with its model, before wrapping the model in
    `DistributedDataParallel`. Returns the number of processes.

    Raises:
        RuntimeError: no torch process group (call
            `torch.distributed.init_process_group` first).
        ValueError: the processes' tables differ in name or capacity.
        NotImplementedError: on TensorFlow and JAX.
    """
    mark = native_function("table_replicas", "replicate")
    if mark is None:
        backend = keras.backend.backend()
        raise NotImplementedError(
            "kmodels.distributed.replicate_tables prepares GrowableEmbedding "
            "tables for torch DistributedDataParallel, which needs the torch "
            f"backend; the running backend is {backend!r}. "
            f"{_ENGINES[backend]} (docs/distributed.md)."
        )
    return mark(model, tables)


def is_replicated(layer):
    """Whether `replicate` marked `layer` (always False on TensorFlow and
    JAX)."""
    replicated = native_function("table_replicas", "is_replicated")
    # Tables are never marked elsewhere (`replicate` raises).
    return False if replicated is None else replicated(layer)


def largest_id(layer, high):
    """The largest of the ints `high` of every replica of `layer` (an
    all-reduce; `-1` for a batch without ids); `high` itself for a table
    that is not replicated."""
    largest = native_function("table_replicas", "largest_id")
    return high if largest is None else largest(layer, high)


def gathered_batch(layer, ids, grads, seen):
    """The flat `ids`, `(n, dim)` gradients `grads` and optional boolean
    mask `seen` of the sparse update of every replica of `layer`,
    concatenated in rank order, the gradients divided by the number of
    processes (DDP's average); `None` for a table that is not replicated
    (always on TensorFlow and JAX). torch's backward pass calls it."""
    gathered = native_function("table_replicas", "gathered_batch")
    if gathered is None:
        return None
    return gathered(layer, ids, grads, seen)
