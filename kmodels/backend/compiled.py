"""Compiling an inference function that reads Keras variables.

`compile_reader(fn, variables)` returns a callable equivalent to `fn` that
runs as one compiled graph on TensorFlow (`tf.function`) and JAX (`jax.jit`,
with the variables' current values passed in as arguments through a
`keras.StatelessScope`, so updated weights are seen without retracing) and
eagerly on torch. `fn` must only read `variables`, never assign them.
"""

import keras


def compile_reader(fn, variables):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        return tf.function(fn, reduce_retracing=True)
    if backend == "jax":
        import jax

        variables = list(variables)

        def pure(values, *args):
            with keras.StatelessScope(
                state_mapping=list(zip(variables, values))
            ):
                return fn(*args)

        jitted = jax.jit(pure)

        def call(*args):
            return jitted([v.value for v in variables], *args)

        return call
    return fn
