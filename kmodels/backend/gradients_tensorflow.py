"""`variable_gradients` for the TensorFlow backend (see `gradients.py`)."""

import tensorflow as tf


def variable_gradients(model, loss_fn, x, y):
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    # `None` for a variable the loss does not depend on.
    return loss, tape.gradient(loss, variables)
