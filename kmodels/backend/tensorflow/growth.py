"""TensorFlow side of `kmodels.backend.growth`."""

import contextlib

import keras
import numpy as np
import tensorflow as tf

from kmodels.backend import keras_internals
from kmodels.backend.common import reserve


def make_resizable(variable):
    old = keras_internals.variable_storage(variable)
    distributed = isinstance(old, tf.distribute.DistributedValues)
    # Refused unless MirroredStrategy (a DistributedVariable), one device
    # (OneDeviceStrategy) or no strategy scope.
    if distributed or tf.distribute.has_strategy():
        strategy = (
            old.distribute_strategy
            if distributed
            else tf.distribute.get_strategy()
        )
        _check_strategy(variable, strategy)
    # A MirroredVariable is made again under its own strategy: one
    # resizable component per replica, grown and reset all together.
    scope = (
        old.distribute_strategy.scope()
        if distributed
        else contextlib.nullcontext()
    )
    with tf.init_scope(), scope:
        resizable = tf.Variable(
            old.read_value(),
            dtype=old.dtype,
            trainable=old.trainable,
            name=variable.name,
            shape=tf.TensorShape([None] + old.shape.as_list()[1:]),
            aggregation=old.aggregation,
            synchronization=old.synchronization,
        )
        keras_internals.set_variable_storage(variable, resizable)


def _check_strategy(variable, strategy):
    # MirroredStrategy (one host, any number of devices) is supported:
    # every replica keeps a whole copy of the table and applies the same
    # all-gathered sparse update to it (`sparse_lookup`). Other strategies
    # place or synchronise variables otherwise (several hosts, a parameter
    # server, TPU embeddings): refused at build time, not in a step.
    if isinstance(
        strategy,
        (tf.distribute.MirroredStrategy, tf.distribute.OneDeviceStrategy),
    ):
        return
    raise NotImplementedError(
        f"GrowableEmbedding ('{variable.path}') supports "
        "tf.distribute.MirroredStrategy (one host) only: expected a "
        "MirroredStrategy or no strategy scope; got "
        f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} "
        "replica(s). Use MirroredStrategy, or the JAX backend with "
        "keras.distribution (kmodels.distributed.shard_embedding_rows)."
    )


def resize_variable(variable, value):
    # Same tf.Variable (first dimension dynamic): compiled train, test and
    # predict functions read the grown table; XLA recompiles for the shape.
    storage = keras_internals.variable_storage(variable)
    if storage.shape.rank and storage.shape[0] is not None:
        make_resizable(variable)
        storage = keras_internals.variable_storage(variable)
    storage.assign(tf.cast(value, storage.dtype))
    keras_internals.set_variable_shape(variable, value.shape)


def append_rows(variable, rows):
    table = keras.ops.convert_to_numpy(variable.value)
    resize_variable(variable, np.concatenate([table, rows]))


def grow_in_place(layer, capacity):
    # Under EmbeddingGrowth (one device): the fresh rows of the table's
    # reserve are drawn once, and a growth within it appends a slice of
    # them on the device (no copy through the host).
    storage = keras_internals.variable_storage(layer.embeddings)
    if not layer.managed_growth or tf.distribute.has_strategy():
        return False
    if isinstance(storage, tf.distribute.DistributedValues):
        return False
    old = layer.capacity
    rows = layer.__dict__.get("_kmodels_reserve_rows", 0)
    if rows < capacity:
        rows = reserve.next_reserve(layer, capacity)
        layer.__dict__["_kmodels_reserve_rows"] = rows
    for variable in reserve.grown_variables(layer):
        storage = keras_internals.variable_storage(variable)
        fresh = reserve.fresh_rows(layer, variable, old, rows)
        fresh = tf.constant(fresh[: capacity - old], dtype=storage.dtype)
        storage.assign(tf.concat([storage.read_value_no_copy(), fresh], 0))
        shape = (capacity, *tuple(variable.shape)[1:])
        keras_internals.set_variable_shape(variable, shape)
    return True


def write_rows(variable, rows, values):
    # A resource scatter: only these rows are written.
    storage = keras_internals.variable_storage(variable)
    storage.scatter_update(
        tf.IndexedSlices(
            tf.convert_to_tensor(values, dtype=storage.dtype),
            tf.convert_to_tensor(rows, dtype=tf.int64),
        )
    )


def capacity_of(variable):
    value = variable.value
    if isinstance(value, tf.Variable):
        # VariableShape, not a read: once a variable has had sparse
        # updates, TensorFlow copies it whole on every dense read. A
        # MirroredVariable: this replica's component (the primary outside
        # a replica function); all have the same shape.
        return tf.raw_ops.VariableShape(
            input=_local_handle(value), out_type=tf.int32
        )[0]
    return tf.shape(value, out_type=tf.int32)[0]


def _local_handle(variable):
    """The resource handle of `variable`, or of this replica's component of
    a MirroredVariable (inside `strategy.run`; the primary outside)."""
    if not isinstance(variable, tf.distribute.DistributedValues):
        return variable.handle
    if tf.distribute.in_cross_replica_context():
        return variable.distribute_strategy.experimental_local_results(
            variable
        )[0].handle
    return variable.handle


def is_concrete(x):
    return tf.executing_eagerly() and not isinstance(x, tf.Variable)


def sparse_lookup(layer, ids, seen=None):
    table = layer.embeddings.value
    slots = [s.value for s in layer.updated_slots]
    replicas = _replica_context(table)
    if replicas is None:
        return _one_device_lookup(layer, table, slots, ids, seen)
    return _replicated_lookup(layer, replicas, table, slots, ids, seen)


def _one_device_lookup(layer, table, slots, ids, seen):
    gathered = tf.gather(table, ids)

    @tf.custom_gradient
    def hook(gathered, step):
        def grad(grads):
            variables = [table, *slots]
            rows, new_rows, new_slot_rows = layer.sparse_row_update(
                lambda k, r: tf.gather(variables[k], r),
                step,
                ids,
                grads,
                seen=seen,
            )
            updates = [table.scatter_update(tf.IndexedSlices(new_rows, rows))]
            for slot, slot_rows in zip(slots, new_slot_rows):
                updates.append(
                    slot.scatter_update(tf.IndexedSlices(slot_rows, rows))
                )
            with tf.control_dependencies(updates):
                return None, tf.identity(step + 1)

        return tf.identity(gathered), grad

    return hook(gathered, tf.convert_to_tensor(layer.step.value))


def _replica_context(table):
    """The replica context of a `strategy.run` over a MirroredVariable
    table, or `None` (one device; or a MirroredVariable read outside a
    replica function, e.g. an eager call under `strategy.scope()`)."""
    if not isinstance(table, tf.distribute.DistributedValues):
        return None
    if tf.distribute.in_cross_replica_context():
        return None
    return tf.distribute.get_replica_context()


def _replicated_lookup(layer, context, table, slots, ids, seen):
    """`sparse_lookup` inside one replica of a MirroredStrategy step.

    Each replica reads its own component of the table. In the backward
    pass the replicas all-gather their ids and per-position gradients
    (and `seen`), in replica order, which is the order of the global
    batch; each then runs the same sparse update on the same gathered
    batch and writes it into its own component of the table and of the
    slots. Keras has already divided each replica's loss by the number
    of replicas, so the gathered gradients are those of the global
    batch's loss when it splits evenly (an uneven split weighs the
    examples of a smaller slice more, for every Keras weight alike), and
    every component ends equal to a one-device step on the global batch
    (the rows are summed in another order: a few ulps). Uneven slices,
    even empty ones, are gathered as they are."""
    handles = [_local_handle(v) for v in (table, *slots)]
    dtypes = [v.dtype for v in (table, *slots)]

    def gather(k, rows):
        return tf.raw_ops.ResourceGather(
            resource=handles[k], indices=rows, dtype=dtypes[k]
        )

    gathered = gather(0, ids)

    @tf.custom_gradient
    def hook(gathered, step):
        def grad(grads):
            grads = tf.reshape(grads, (-1, layer.output_dim))
            all_ids = context.all_gather(ids, axis=0)
            all_grads = context.all_gather(grads, axis=0)
            all_seen = None
            if seen is not None:
                all_seen = context.all_gather(tf.cast(seen, tf.int32), axis=0)
                all_seen = tf.cast(all_seen, tf.bool)
            rows, new_rows, new_slot_rows = layer.sparse_row_update(
                gather, step, all_ids, all_grads, seen=all_seen
            )
            updates = [
                tf.raw_ops.ResourceScatterUpdate(
                    resource=handle, indices=rows, updates=values
                )
                for handle, values in zip(handles, [new_rows, *new_slot_rows])
            ]
            with tf.control_dependencies(updates):
                # The step's "gradient": its new value. The variable
                # aggregates "only_first_replica", so Keras' overwrite
                # (an assign in the replica context) writes replica 0's
                # value, equal on every replica, into every component.
                return None, tf.identity(step + 1)

        return tf.identity(gathered), grad

    return hook(gathered, tf.convert_to_tensor(layer.step.value))


def global_batches(batches):
    """The batches a MirroredStrategy step is about to consume, whole:
    `fit` hands the step per-replica slices of each global batch
    (`PerReplica` values, replica `i` holding its `i`-th slice); growth,
    the id checks and the row restarts read the global batch."""
    return [tf.nest.map_structure(_whole, batch) for batch in batches]


def _whole(value):
    if not isinstance(value, tf.distribute.DistributedValues):
        return value
    parts = value.values
    return tf.concat(parts, axis=0) if parts[0].shape.rank else parts[0]


def train_step_runner(model, retrace):
    # Imported here: the interface module imports this package.
    from kmodels.backend import steps

    original = steps.keras_step_function(model, "train")
    # Tables are resizable tf.Variables, so one trace serves every capacity
    # (XLA recompiles for new shapes by itself); reused across fits unless
    # the model was compiled again (`original` is new) or a table's rule
    # changed.
    cached = getattr(model, "_kmodels_growth_step", None)
    if retrace or cached is None or cached[0] is not original:
        cached = (original, None)
    compiled = [cached[1]]

    def build():
        strategy = model.distribute_strategy

        def one_step(data):
            logs = strategy.run(model.train_step, args=(data,))
            # As Keras' own step (`reduction="auto"`): the replicas' logs
            # (equal: the metrics are synchronised) averaged.
            return tf.nest.map_structure(_mean_over_replicas(strategy), logs)

        if model.run_eagerly:
            return one_step
        # No XLA: XLA passes resource variables in and out whole, so a
        # scatter into a 1M-row table would copy all of it every step.
        return tf.function(one_step, reduce_retracing=True, jit_compile=False)

    def run(batches):
        if compiled[0] is None:
            compiled[0] = build()
            model._kmodels_growth_step = (original, compiled[0])
        for batch in batches:
            logs = compiled[0](batch)
        return logs

    return run


def _mean_over_replicas(strategy):
    def mean(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return strategy.reduce(tf.distribute.ReduceOp.MEAN, value, None)
        return value

    return mean
