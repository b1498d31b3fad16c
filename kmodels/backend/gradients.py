"""Per-variable gradients of a loss, with the active backend's own autodiff.

`variable_gradients` dispatches to one small module per backend; only those
modules import TensorFlow, JAX or torch.
"""

import importlib

import keras

_MODULES = {
    "tensorflow": "kmodels.backend.gradients_tensorflow",
    "jax": "kmodels.backend.gradients_jax",
    "torch": "kmodels.backend.gradients_torch",
}


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
    backend = keras.backend.backend()
    if backend not in _MODULES:
        raise NotImplementedError(
            "variable_gradients supports the tensorflow, jax and torch "
            f"backends; the active backend is {backend!r}."
        )
    module = importlib.import_module(_MODULES[backend])
    if variables is None:
        variables = model.trainable_variables
    loss, grads = module.variable_gradients(
        model, loss_fn, x, y, list(variables)
    )
    return float(keras.ops.convert_to_numpy(loss)), [
        None if g is None else keras.ops.convert_to_numpy(g) for g in grads
    ]
