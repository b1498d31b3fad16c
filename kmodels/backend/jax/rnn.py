"""JAX side of `kmodels.backend.rnn`."""

import jax
from keras import ops


def prefers_one_recurrence():
    # Measured on the CPU only (see `kmodels.backend.rnn`).
    return jax.default_backend() == "cpu"


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
