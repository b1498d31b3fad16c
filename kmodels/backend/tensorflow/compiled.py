"""TensorFlow side of `kmodels.backend.compiled`."""

import tensorflow as tf


def compile_reader(fn, variables):
    # A tf.function reads the variables' current values on every call.
    return tf.function(fn, reduce_retracing=True)
