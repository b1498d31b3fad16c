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


# Steps unrolled into one loop iteration: a fully unrolled 20-step
# recurrence lets XLA schedule each step's products and gates without the
# loop's per-iteration copies (the Seq2Seq train step with `run_grus`
# 1.05-1.07x faster than with Keras' GRU layers, 1.02-1.03x rolled).
# Longer sequences still loop, so compilation stays bounded; a symbolic
# length (a `jax.export` with polymorphic shapes) is not unrolled.
SCAN_UNROLL = 32


def scan(f, init, xs, reverse=False):
    steps = xs[0].shape[0]
    unroll = SCAN_UNROLL if isinstance(steps, int) else 1
    return ops.scan(f, init, xs, reverse=reverse, unroll=unroll)


def custom_gradient(forward, backward, output_shapes):
    @jax.custom_vjp
    def f(*inputs):
        return forward(*inputs)[0]

    def f_backward(residuals, gradients):
        return tuple(backward(residuals, tuple(gradients)))

    f.defvjp(forward, f_backward)
    return f
