"""Gradients of a loss with the active backend's own autodiff."""

import keras

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


def _to_numpy(loss, grads):
    return float(keras.ops.convert_to_numpy(loss)), [
        None if g is None else keras.ops.convert_to_numpy(g) for g in grads
    ]
