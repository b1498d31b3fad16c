"""TensorFlow side of `kmodels.backend.gradients`."""

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
