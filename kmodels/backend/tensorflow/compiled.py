"""TensorFlow side of `kmodels.backend.compiled`."""

import tensorflow as tf


def compile_reader(fn, variables):
    # A tf.function reads the variables' current values on every call.
    # Keras code needs no AutoGraph (its loops are tf.while_loop already),
    # and AutoGraph's cache of converted methods would keep every layer
    # called in `fn` alive for good.
    return tf.function(fn, reduce_retracing=True, autograph=False)


def compile_inference_loop(fn, variables):
    return tf.function(
        fn, reduce_retracing=True, autograph=False, jit_compile=True
    )


def xla_train_step():
    # Keras' "auto" is False on CPU-only machines only.
    devices = tf.config.list_physical_devices()
    return all(d.device_type == "CPU" for d in devices)


def may_compile_eager_call(values):
    # Under a tf.function nothing is eager; a tf.GradientTape differentiates
    # through a tf.function call, so it does not prevent compiling. A
    # distribution strategy's variables stay with the uncompiled call.
    if not tf.executing_eagerly() or tf.distribute.has_strategy():
        return False
    return all(isinstance(v, tf.Tensor) for v in values)
