"""TensorFlow side of `kmodels.backend.growth`."""

import keras
import numpy as np
import tensorflow as tf

from kmodels.backend import keras_internals


def table_is_trainable():
    # Rows are written in place with resource scatters in the backward pass.
    return False


def make_resizable(variable):
    old = keras_internals.variable_storage(variable)
    if isinstance(old, tf.distribute.DistributedValues):
        _refuse_strategy(variable)
    with tf.init_scope():
        resizable = tf.Variable(
            old.read_value(),
            dtype=old.dtype,
            trainable=old.trainable,
            name=variable.name,
            shape=tf.TensorShape([None] + old.shape.as_list()[1:]),
        )
        keras_internals.set_variable_storage(variable, resizable)


def _refuse_strategy(variable):
    # Under a tf.distribute strategy (even a one-device MirroredStrategy)
    # Keras creates DistributedVariables: their handle exists only inside a
    # replica context, and the sparse row updates would have to be written
    # to every copy. Fail at build time instead of inside the first step.
    strategy = tf.distribute.get_strategy()
    raise NotImplementedError(
        f"GrowableEmbedding ('{variable.path}') does not support "
        "tf.distribute strategies: expected the default strategy (one "
        f"device, no strategy scope); got {type(strategy).__name__} with "
        f"{strategy.num_replicas_in_sync} replica(s). Build and train the "
        "model outside strategy.scope(), or use the JAX backend with "
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


def write_rows(variable, rows, values):
    # A resource scatter: only these rows are written.
    storage = keras_internals.variable_storage(variable)
    storage.scatter_update(
        tf.IndexedSlices(
            tf.convert_to_tensor(values, dtype=storage.dtype),
            tf.convert_to_tensor(rows, dtype=tf.int64),
        )
    )


def row_shards(variable):
    # Keras ignores `LayoutMap` on TensorFlow: tables are never sharded.
    return 1


def planned_row_shards(layer, name, shape):
    return 1


def argsort_ids(ids, capacity):
    return keras.ops.argsort(ids)


def capacity_of(variable):
    value = variable.value
    if isinstance(value, tf.Variable):
        # VariableShape, not a read: once a variable has had sparse
        # updates, TensorFlow copies it whole on every dense read.
        return tf.raw_ops.VariableShape(input=value.handle, out_type=tf.int32)[
            0
        ]
    return tf.shape(value, out_type=tf.int32)[0]


def is_concrete(x):
    return tf.executing_eagerly() and not isinstance(x, tf.Variable)


def sparse_lookup(layer, ids, seen=None):
    table = layer.embeddings.value
    slots = [s.value for s in layer.trained_slots]
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


def adam_rows_in_place(
    rows, momentum, velocity, grads, step, rate, beta_1, beta_2, epsilon
):
    # Never called: only torch's eager backward pass updates rows in
    # place; here the update is traced, in `keras.ops` (`SparseAdam.update`).
    raise NotImplementedError(
        "adam_rows_in_place is torch's in-place Adam; tensorflow runs "
        "SparseAdam.update."
    )


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
        def one_step(data):
            return model.distribute_strategy.run(model.train_step, args=(data,))

        if model.run_eagerly:
            return one_step
        # No XLA: XLA passes resource variables in and out whole, so a
        # scatter into a 1M-row table would copy all of it every step.
        return tf.function(one_step, reduce_retracing=True, jit_compile=False)

    def run(batches):
        if model.distribute_strategy.num_replicas_in_sync > 1:
            raise NotImplementedError(
                "EmbeddingGrowth supports one replica on TensorFlow; got "
                f"{model.distribute_strategy.num_replicas_in_sync}."
            )
        if compiled[0] is None:
            compiled[0] = build()
            model._kmodels_growth_step = (original, compiled[0])
        for batch in batches:
            logs = compiled[0](batch)
        return logs

    return run
