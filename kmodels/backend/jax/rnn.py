"""JAX side of `kmodels.backend.rnn`."""

import jax
from keras import ops


def is_eager_right_padded(mask):
    # `call` is traced: the mask's values are unknown, and XLA's GRU scan
    # has no faster path without a mask.
    return False


def prefers_one_recurrence():
    # XLA runs Keras' own scan as fast on the CPU (measured).
    return False


def prefers_one_model_recurrence():
    return False


def gru_recurrence():
    # Compiled: the `keras.ops` recurrence (when used) is as fast.
    return None


def scan(f, init, xs, reverse=False):
    return ops.scan(f, init, xs, reverse=reverse)


def custom_gradient(forward, backward, output_shapes):
    @jax.custom_vjp
    def f(*inputs):
        return forward(*inputs)[0]

    def f_backward(residuals, gradients):
        return tuple(backward(residuals, tuple(gradients)))

    f.defvjp(forward, f_backward)
    return f
