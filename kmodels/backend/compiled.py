"""Compiling an inference function that reads Keras variables."""

from kmodels.backend import native


def compile_reader(fn, variables):
    """A callable equivalent to `fn`, compiled once for the backend.

    It runs as one compiled graph on TensorFlow (`tf.function`) and JAX
    (`jax.jit`, with the variables' current values passed in as arguments
    through a `keras.StatelessScope`, so updated weights are seen without
    retracing) and eagerly on torch. `fn` must only read `variables`, never
    assign them.

    Args:
        fn: the function to compile.
        variables: the Keras variables `fn` reads.
    """
    return native.compiled.compile_reader(fn, variables)
