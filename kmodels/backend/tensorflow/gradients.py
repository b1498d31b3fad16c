"""TensorFlow side of `kmodels.backend.gradients`."""

import keras
import tensorflow as tf


def variable_gradients(model, loss_fn, x, y, variables):
    values = [v.value for v in variables]
    with tf.GradientTape() as tape:
        # Non-trainable variables (GrowableEmbedding tables) are not
        # watched by default.
        tape.watch(values)
        loss = loss_fn(y, model(x, training=True))
    # `None` for a variable the loss does not depend on; a gather gives
    # `IndexedSlices`, made dense here.
    grads = tape.gradient(loss, values)
    return loss, [None if g is None else tf.convert_to_tensor(g) for g in grads]


def loss_gradients(model, loss_fn, variables):
    with tf.GradientTape() as tape:
        loss = loss_fn()
    # `None` for a variable the loss does not depend on.
    return loss, tape.gradient(loss, [v.value for v in variables])


def gradient_function(model, loss_fn, variables):
    mapped = list(variables)

    # One graph, traced once per input signature; the variables are read
    # when it runs, so each call sees the current weights.
    @tf.function(reduce_retracing=True)
    def run(x, y):
        # A variable that can grow (a `GrowableEmbedding` table) reads with
        # an unknown first dimension, which `StatelessScope` refuses: its
        # current shape is fixed here; a caller makes a new function when a
        # shape changes (`GradientMonitor`).
        values = [
            tf.ensure_shape(tf.convert_to_tensor(v.value), v.shape)
            for v in mapped
        ]
        with tf.GradientTape() as tape:
            tape.watch(values)
            # Assignments (batch-norm statistics, seed state) stay in the
            # scope: nothing is written.
            with keras.StatelessScope(state_mapping=list(zip(mapped, values))):
                loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, values)
        return loss, [
            None if g is None else tf.convert_to_tensor(g) for g in grads
        ]

    return run
