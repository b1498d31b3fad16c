"""JAX side of `kmodels.backend.rnn`."""

import jax
from keras import ops


def is_eager_right_padded(mask):
    # `call` is traced: the mask's values are unknown, and XLA's GRU scan
    # has no faster path without a mask.
    return False


def prefers_one_recurrence():
    # Measured on the CPU only (see `kmodels.backend.rnn`).
    return jax.default_backend() == "cpu"


def prefers_one_model_recurrence():
    # One loop for the encoder and the decoder measured no faster than a
    # loop per layer (XLA overlaps them).
    return False


def gru_recurrence():
    # Compiled: the `keras.ops` recurrence (when used) is as fast.
    return None


def gru_projected_recurrence(x):
    # Compiled: XLA fuses the projections' bias add and stacking.
    return None


def scan(f, init, xs, reverse=False):
    # Not unrolled: fully unrolling the 20-step recurrences made the
    # Seq2Seq train step ~1.03x faster but its compilation 2.5x slower
    # (23.5 against 9.2 s); 4 steps per iteration gained nothing.
    return ops.scan(f, init, xs, reverse=reverse)


def custom_gradient(forward, backward, output_shapes):
    @jax.custom_vjp
    def f(*inputs):
        return forward(*inputs)[0]

    def f_backward(residuals, gradients):
        return tuple(backward(residuals, tuple(gradients)))

    f.defvjp(forward, f_backward)
    return f
