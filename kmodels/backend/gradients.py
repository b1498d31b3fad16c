"""Gradients of a loss with the active backend's own autodiff."""

import keras
import numpy as np

from kmodels.backend import native


def variable_gradients(model, loss_fn, x, y, variables=None):
    """Loss and gradients of `loss_fn(y, model(x, training=True))`.

    Gradients are computed exactly as the backend's training step would:
    `tf.GradientTape` on TensorFlow, `jax.value_and_grad` over
    `model.stateless_call` on JAX, `torch.autograd.grad` on torch.

    Args:
        model: a built `keras.Model`.
        loss_fn: callable `(y_true, y_pred) -> scalar`.
        x: model inputs (NumPy arrays or tensors).
        y: targets.
        variables: the model variables to differentiate with respect to
            (default: `model.trainable_variables`); may include
            non-trainable ones, e.g. a `GrowableEmbedding` table on
            TensorFlow and torch.

    Returns:
        `(loss, grads)`: the loss as a Python float and one NumPy array per
        entry of `variables`, or `None` where the backend reports no
        gradient at all (TensorFlow and torch do this for a variable the loss
        does not depend on; JAX returns zeros instead).
    """
    if variables is None:
        variables = model.trainable_variables
    loss, grads = native.gradients.variable_gradients(
        model, loss_fn, x, y, list(variables)
    )
    return _to_numpy(loss, grads)


def loss_gradients(model, loss_fn):
    """Loss and gradients of `loss_fn()`, a function of no argument that
    calls `model`, with respect to `model.trainable_variables`.

    `tf.GradientTape` on TensorFlow, `jax.value_and_grad` with the
    variables' values in a `keras.StatelessScope` on JAX (the model's other
    variables keep their current values), `torch.autograd.grad` on torch.

    Returns:
        `(loss, grads)`: the loss as a Python float and one NumPy array per
        trainable variable, or `None` where the backend reports no gradient
        (TensorFlow and torch, for a variable the loss does not depend on;
        JAX returns zeros instead).
    """
    variables = list(model.trainable_variables)
    loss, grads = native.gradients.loss_gradients(model, loss_fn, variables)
    return _to_numpy(loss, grads)


def gradient_function(model, loss_fn, variables):
    """A reusable function `(x, y) -> (loss, grads)`: the loss
    `loss_fn(y, model(x, training=True))` and its gradients with respect to
    `variables`, compiled once for repeated calls during training.

    Runs as one `tf.function` on TensorFlow and one `jax.jit` program on
    JAX (every model variable is an argument, so each call sees the current
    weights without retracing), eagerly on torch. The forward pass runs in
    a `keras.StatelessScope` whose values are the variables' current ones:
    it writes nothing (batch-norm statistics, seed-generator state).

    Args:
        model: a built `keras.Model`.
        loss_fn: callable `(y_true, y_pred) -> scalar`.
        variables: the model variables to differentiate with respect to.

    Returns:
        A callable `(x, y) -> (loss, grads)`: the loss as a Python float and
        one NumPy array per variable, or `None` where the backend reports no
        gradient (TensorFlow and torch; JAX returns zeros).
    """
    run = native.gradients.gradient_function(model, loss_fn, list(variables))

    def gradients(x, y):
        return _to_numpy(*run(x, y))

    return gradients


class SummaryWriter:
    """Writes TensorBoard scalars and histograms with `tf.summary.write`, on
    every backend (TensorFlow is installed with each of them; imported
    here, when a writer is made, as Keras' own `TensorBoard` callback
    does).

    The records are those of TensorBoard's scalar and histogram plugins (a
    float32 scalar; a `(buckets, 3)` float64 tensor of left edge, right
    edge, count), written with TensorFlow's own summary op: the
    `tensorboard` package is needed to view them, not to write them
    (`tf.summary.scalar` and `tf.summary.histogram` need it installed).

    Args:
        log_dir: the folder of the event files.
    """

    BUCKETS = 30

    def __init__(self, log_dir):
        import tensorflow as tf

        self._tf = tf
        self._writer = tf.summary.create_file_writer(log_dir)
        self._metadata = {}
        for plugin in ("scalars", "histograms"):
            metadata = tf.compat.v1.SummaryMetadata()
            metadata.plugin_data.plugin_name = plugin
            self._metadata[plugin] = metadata

    def write(self, step, scalars, histograms):
        """Writes `{tag: float}` scalars and `{tag: array}` histograms at
        `step`."""
        tf = self._tf
        with self._writer.as_default(step=step):
            for tag, value in scalars.items():
                tf.summary.write(
                    tag,
                    tf.constant(value, "float32"),
                    metadata=self._metadata["scalars"],
                )
            for tag, values in histograms.items():
                tf.summary.write(
                    tag,
                    tf.constant(_buckets(values, self.BUCKETS), "float64"),
                    metadata=self._metadata["histograms"],
                )
        self._writer.flush()

    def close(self):
        self._writer.close()


def _buckets(values, count):
    """TensorBoard's histogram layout: rows `(left, right, count)`."""
    values = np.asarray(values, "float64").reshape(-1)
    if values.size == 0:
        return np.zeros((0, 3))
    low, high = values.min(), values.max()
    if low == high:
        return np.array([[low, high, values.size]], "float64")
    counts, edges = np.histogram(values, bins=count, range=(low, high))
    return np.stack([edges[:-1], edges[1:], counts], axis=1)


def _to_numpy(loss, grads):
    return float(keras.ops.convert_to_numpy(loss)), [
        None if g is None else keras.ops.convert_to_numpy(g) for g in grads
    ]
