"""TensorFlow side of `kmodels.backend.rnn`."""

import tensorflow as tf


def prefers_one_recurrence():
    # On a GPU Keras' GRU runs cuDNN's kernel (masks included).
    devices = tf.config.list_physical_devices()
    return all(d.device_type == "CPU" for d in devices)


def scan(f, init, xs, reverse=False):
    # `ops.scan` stacks a tuple of per-step outputs wrongly on TensorFlow
    # (Keras 3.15): a while loop over `TensorArray`s. The first step runs
    # before the loop, to learn the outputs' dtypes and shapes.
    xs = tuple(tf.convert_to_tensor(x) for x in xs)
    # Static where known: XLA needs the loop's bound.
    steps = xs[0].shape[0]
    if steps is None:
        steps = tf.shape(xs[0])[0]
    inputs = [
        tf.TensorArray(x.dtype, size=steps, element_shape=x.shape[1:]).unstack(
            x
        )
        for x in xs
    ]

    def index(i):
        return steps - 1 - i if reverse else i

    first = index(0)
    carry, ys = f(init, tuple(array.read(first) for array in inputs))
    outputs = [
        tf.TensorArray(y.dtype, size=steps, element_shape=y.shape).write(
            first, y
        )
        for y in ys
    ]

    def body(i, carry, outputs):
        t = index(i)
        carry, ys = f(carry, tuple(array.read(t) for array in inputs))
        outputs = [array.write(t, y) for array, y in zip(outputs, ys)]
        return i + 1, carry, outputs

    _, carry, outputs = tf.while_loop(
        lambda i, *_: i < steps,
        body,
        (tf.constant(1), carry, outputs),
        maximum_iterations=steps,
    )
    return carry, tuple(array.stack() for array in outputs)


def custom_gradient(forward, backward, output_shapes):
    # Each pass is its own XLA function, also inside a step compiled
    # without XLA (Keras' default on CPU-only machines), where TensorFlow's
    # graph executor pays per operation in the loop. Their loops stay
    # inside them: XLA cannot differentiate a `tf.while_loop` across the
    # function boundary, and need not, the gradient being `backward`.
    forward_xla = tf.function(forward, jit_compile=True, autograph=False)
    backward_xla = tf.function(backward, jit_compile=True, autograph=False)

    @tf.custom_gradient
    def f(*inputs):
        # Not recorded by the tape (a recorded call would make TensorFlow
        # return the loop's intermediates for its own gradient).
        outputs, residuals = forward_xla(*(tf.stop_gradient(x) for x in inputs))
        for output, shape in zip(outputs, output_shapes(*inputs)):
            output.set_shape(shape)

        def gradient(*gradients):
            # An output that does not reach the loss has no gradient.
            gradients = tuple(
                tf.zeros_like(o) if g is None else g
                for o, g in zip(outputs, gradients)
            )
            return list(backward_xla(residuals, gradients))

        return tuple(outputs), gradient

    return f
